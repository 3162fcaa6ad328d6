package gopclntab

// chunks is an append-only list stored in fixed-size blocks: growing it never copies what is
// already there, which matters for the millions of line rows of a large binary.
type chunks[T any] struct {
	blocks [][]T
	n      int
}

const chunkSize = 1 << 14

// firstBlock is the first block's starting size: it grows by appending up to chunkSize, so a
// list of one function's rows (the Resolver decodes functions one at a time) stays small.
const firstBlock = 32

func (c *chunks[T]) add(v T) {
	switch k := len(c.blocks); {
	case k == 0:
		c.blocks = append(c.blocks, make([]T, 0, firstBlock))
	case len(c.blocks[k-1]) == chunkSize:
		c.blocks = append(c.blocks, make([]T, 0, chunkSize))
	}
	k := len(c.blocks) - 1
	c.blocks[k] = append(c.blocks[k], v)
	c.n++
}

// truncate drops the values from position n on, keeping the memory of the blocks it keeps.
func (c *chunks[T]) truncate(n int) {
	if n >= c.n {
		return
	}
	nb := max((n+chunkSize-1)/chunkSize, 1)
	c.blocks = c.blocks[:nb]
	c.blocks[nb-1] = c.blocks[nb-1][:n-(nb-1)*chunkSize]
	c.n = n
}

// at returns the value at position i: every block but the last holds chunkSize values.
func (c *chunks[T]) at(i int) *T { return &c.blocks[i/chunkSize][i%chunkSize] }

func (c *chunks[T]) len() int { return c.n }

func (c *chunks[T]) each(fn func(*T)) {
	for _, b := range c.blocks {
		for i := range b {
			fn(&b[i])
		}
	}
}
