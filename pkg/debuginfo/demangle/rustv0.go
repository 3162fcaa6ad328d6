package demangle

import (
	"slices"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
)

// maxBackrefs bounds the backref expansions of one v0 name. Each expansion re-reads an
// earlier part of the name, and nested ones multiply: "TB_B_E" repeated n times expands 2^n
// times. Real names expand a few dozen times.
const maxBackrefs = 1 << 14

// maxV0Depth bounds the nesting of a v0 name's paths, types and constants.
const maxV0Depth = 256

// rustV0String demangles a Rust v0 name with the module's parser after v0Rewrite has made the
// name one the module reads as the v0 grammar says, and bounded its expansion.
func rustV0String(name string) (string, bool) {
	fixed, ok := v0Rewrite(name)
	if !ok {
		return "", false
	}
	out, err := demangle.ToString(fixed, opts...)
	return out, err == nil
}

// v0Rewrite reads a v0 name ("_R" <path> [<instantiating-crate>] ["." suffix]) through the
// grammar of the v0 mangling RFC as the module implements it, and writes it back with the two
// spellings the module reads otherwise than rustc-demangle and LLVM:
//
//   - <decimal-number> is "0" or a number without leading zeros, so "05foo" is an empty
//     identifier followed by another one (rustc's nested closures "...00s_0", statics
//     "...0023___RUST_STD_INTERNAL_VAL"); the module reads all the digits as one number. An
//     empty identifier followed by a digit is written "0_", whose '_' separator the module
//     skips.
//   - An implementation-internal namespace with no name ("Nc <path> 0", rustc's tuple-struct
//     constructors) prints nothing; the module prints "::". It is written as its path alone.
//
// Backrefs are byte offsets into the name, so each is rewritten to where its target moved;
// one that points anywhere but at the start of an earlier path, type or constant is refused.
// The number of backref expansions the module would do is counted on the way (each target's
// own expansions are known when it is reached) and bounded by maxBackrefs.
func v0Rewrite(name string) (string, bool) {
	body, suffix := name[2:], ""
	if i := strings.IndexByte(body, '.'); i >= 0 {
		body, suffix = body[:i], body[i:]
	}
	w := v0Writers.Get().(*v0Writer)
	defer w.release()
	w.reset(body, false)
	if !w.symbol() {
		return "", false
	}
	if len(w.unnamed) > 0 {
		// Write it again without the unnamed namespaces the first pass found.
		w.reset(body, true)
		if !w.symbol() {
			return "", false
		}
	}
	w.out = append(w.out, suffix...)
	return string(w.out), true
}

// v0Writers keeps writers with their tables for reuse: the index build demangles every
// symbol of a binary, and a v0 name would otherwise allocate its tables each time.
var v0Writers = sync.Pool{New: func() any { return new(v0Writer) }}

// reset readies w for the name body in: for the first pass, or again for the second.
func (w *v0Writer) reset(in string, again bool) {
	n := len(in) + 1
	if cap(w.tables) < 2*n {
		w.tables = make([]int32, 2*n)
	}
	if !again {
		w.unnamed = w.unnamed[:0]
	}
	w.moved, w.cost = w.tables[:n], w.tables[n:2*n]
	for i := range w.moved {
		w.moved[i] = -1
	}
	clear(w.cost)
	*w = v0Writer{in: in, out: append(w.out[:0], "_R"...), moved: w.moved, cost: w.cost, acc: w.acc[:0],
		tables: w.tables, unnamed: w.unnamed, rewriting: again}
}

// release returns w to the pool unless a long name grew its buffers.
func (w *v0Writer) release() {
	if cap(w.tables) <= 1<<12 && cap(w.out) <= 1<<12 {
		v0Writers.Put(w)
	}
}

type v0Writer struct {
	in    string
	pos   int
	out   []byte
	dry   int     // > 0: reading an identifier that is not written
	depth int     // nesting of paths, types and constants
	moved []int32 // offset in out (after "_R") of the production read at an offset of in, or -1
	cost  []int32 // backref expansions of the production read at an offset of in
	acc   []int32 // expansions of the productions being read, innermost last
	bad   bool

	tables []int32 // moved and cost, allocated together

	// unnamed lists the offsets of the internal namespaces with no name, which a second
	// pass (rewriting) leaves out.
	unnamed   []int
	rewriting bool
}

func (w *v0Writer) symbol() bool {
	if w.pos >= len(w.in) || isDigit(w.in[w.pos]) {
		return false // empty, or an encoding version the module does not read
	}
	w.acc = append(w.acc, 0)
	w.path()
	if w.pos < len(w.in) && !w.bad {
		w.path() // instantiating crate
	}
	return !w.bad && w.pos == len(w.in) && w.acc[0] <= maxBackrefs
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (w *v0Writer) fail() { w.bad = true }

func (w *v0Writer) peek() byte {
	if w.pos < len(w.in) {
		return w.in[w.pos]
	}
	return 0
}

// copy writes in[from:w.pos] unchanged.
func (w *v0Writer) copy(from int) {
	if w.dry == 0 {
		w.out = append(w.out, w.in[from:w.pos]...)
	}
}

func (w *v0Writer) write(s string) {
	if w.dry == 0 {
		w.out = append(w.out, s...)
	}
}

// A production is a path, type or constant: what a backref may point at.
type production struct {
	start int   // offset in in
	moved int32 // offset in out, after "_R"
}

// begin starts a production at w.pos; end finishes it. A production is a backref's target
// once it is finished, so none points at one it is part of.
func (w *v0Writer) begin() (production, bool) {
	w.depth++
	if w.depth > maxV0Depth || w.bad || w.pos >= len(w.in) {
		w.fail()
		return production{}, false
	}
	if w.dry == 0 {
		w.acc = append(w.acc, 0)
	}
	return production{start: w.pos, moved: int32(len(w.out) - 2)}, true
}

func (w *v0Writer) end(p production) {
	w.depth--
	if w.dry > 0 || w.bad {
		return
	}
	if w.moved[p.start] < 0 {
		w.moved[p.start] = p.moved
	}
	n := w.acc[len(w.acc)-1]
	w.acc = w.acc[:len(w.acc)-1]
	w.cost[p.start] = max(w.cost[p.start], n)
	w.add(n)
}

// add counts n expansions into the production being read, saturating past the bound.
func (w *v0Writer) add(n int32) {
	top := &w.acc[len(w.acc)-1]
	*top = min(*top+n, maxBackrefs+1)
}

// path reads <path>.
func (w *v0Writer) path() {
	start, ok := w.begin()
	if !ok {
		return
	}
	defer w.end(start)
	c := w.in[w.pos]
	switch c {
	case 'C':
		w.pos++
		w.write("C")
		w.identifier()
	case 'M', 'X':
		w.pos++
		w.write(string(c))
		w.disambiguator()
		w.path()
		w.typ()
		if c == 'X' {
			w.path()
		}
	case 'Y':
		w.pos++
		w.write("Y")
		w.typ()
		w.path()
	case 'N':
		w.nested()
	case 'I':
		w.pos++
		w.write("I")
		w.path()
		for !w.bad && w.peek() != 'E' {
			if w.pos >= len(w.in) {
				w.fail()
				return
			}
			w.genericArg()
		}
		w.expect('E')
	case 'B':
		w.backref()
	default:
		w.fail()
	}
}

// nested reads "N" <namespace> <path> <identifier>. An internal namespace with no name is
// found on the first pass and written as its path alone on the second.
func (w *v0Writer) nested() {
	at := w.pos
	w.pos++
	ns := w.peek()
	if (ns < 'a' || ns > 'z') && (ns < 'A' || ns > 'Z') {
		w.fail()
		return
	}
	w.pos++
	internal := ns >= 'a' && ns <= 'z'
	if internal && w.rewriting && slices.Contains(w.unnamed, at) {
		w.path()
		w.dry++
		w.identifier()
		w.dry--
		return
	}
	w.write(w.in[at : at+2])
	w.path()
	if internal && !w.rewriting && !w.bad && w.emptyIdentifier() {
		w.unnamed = append(w.unnamed, at)
	}
	w.identifier()
}

// emptyIdentifier reports whether the identifier at w.pos, after an optional disambiguator,
// is empty.
func (w *v0Writer) emptyIdentifier() bool {
	i := w.pos
	if i < len(w.in) && w.in[i] == 's' {
		for i++; i < len(w.in) && w.in[i] != '_'; i++ {
		}
		i++
	}
	return i < len(w.in) && w.in[i] == '0'
}

func (w *v0Writer) expect(c byte) {
	if w.peek() != c {
		w.fail()
		return
	}
	w.pos++
	w.write(string(c))
}

// identifier reads [<disambiguator>] <undisambiguated-identifier>.
func (w *v0Writer) identifier() {
	w.disambiguator()
	w.undisambiguated()
}

func (w *v0Writer) disambiguator() {
	if w.peek() == 's' {
		from := w.pos
		w.pos++
		w.base62()
		w.copy(from)
	}
}

// undisambiguated reads ["u"] <decimal-number> ["_"] <bytes>.
func (w *v0Writer) undisambiguated() {
	if w.bad {
		return
	}
	from := w.pos
	if w.peek() == 'u' {
		w.pos++
	}
	if !isDigit(w.peek()) {
		w.fail()
		return
	}
	n := 0
	if w.in[w.pos] == '0' {
		w.pos++
	} else {
		for w.pos < len(w.in) && isDigit(w.in[w.pos]) {
			n = n*10 + int(w.in[w.pos]-'0')
			w.pos++
			if n > len(w.in) {
				w.fail()
				return
			}
		}
	}
	w.copy(from)
	switch {
	case w.peek() == '_':
		w.pos++
		w.write("_")
	case n == 0 && isDigit(w.peek()):
		w.write("_")
	}
	if len(w.in)-w.pos < n {
		w.fail()
		return
	}
	from = w.pos
	w.pos += n
	w.copy(from)
}

// base62 reads a <base-62-number> and returns its value, saturated at len(w.in)+1.
func (w *v0Writer) base62() int {
	if w.peek() == '_' {
		w.pos++
		return 0
	}
	v := 0
	for w.pos < len(w.in) {
		c := w.in[w.pos]
		w.pos++
		var d int
		switch {
		case c == '_':
			return min(v, len(w.in)) + 1
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'z':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'Z':
			d = int(c-'A') + 36
		default:
			w.fail()
			return 0
		}
		v = min(v*62+d, len(w.in)+1)
	}
	w.fail()
	return 0
}

// backref reads "B" <base-62-number> and writes it pointing to where its target moved.
func (w *v0Writer) backref() {
	at := w.pos
	w.pos++
	idx := w.base62()
	if w.bad {
		return
	}
	if idx >= at {
		w.fail()
		return
	}
	if w.dry > 0 {
		return
	}
	to := w.moved[idx]
	if to < 0 {
		w.fail()
		return
	}
	w.write("B")
	w.write(base62String(int(to)))
	w.add(1 + w.cost[idx])
}

// base62String encodes n as a <base-62-number>.
func base62String(n int) string {
	if n == 0 {
		return "_"
	}
	const digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var b [12]byte
	i := len(b) - 1
	b[i] = '_'
	for n--; ; n /= 62 {
		i--
		b[i] = digits[n%62]
		if n < 62 {
			break
		}
	}
	return string(b[i:])
}

func (w *v0Writer) genericArg() {
	switch w.peek() {
	case 'L':
		from := w.pos
		w.pos++
		w.base62()
		w.copy(from)
	case 'K':
		w.pos++
		w.write("K")
		w.constant()
	default:
		w.typ()
	}
}

// basicTypes are the one-letter types of the v0 grammar.
const basicTypes = "abcdefhijlmnopstuvxyz"

// typ reads <type>.
func (w *v0Writer) typ() {
	start, ok := w.begin()
	if !ok {
		return
	}
	defer w.end(start)
	c := w.in[w.pos]
	if c >= 'a' && c <= 'z' {
		if strings.IndexByte(basicTypes, c) < 0 {
			w.fail()
			return
		}
		w.pos++
		w.write(string(c))
		return
	}
	switch c {
	case 'C', 'M', 'X', 'Y', 'N', 'I':
		w.path()
	case 'A', 'S':
		w.pos++
		w.write(string(c))
		w.typ()
		if c == 'A' {
			w.constant()
		}
	case 'T':
		w.pos++
		w.write("T")
		w.typesUntilE()
	case 'R', 'Q':
		w.pos++
		w.write(string(c))
		w.lifetime()
		w.typ()
	case 'P', 'O':
		w.pos++
		w.write(string(c))
		w.typ()
	case 'F':
		w.pos++
		w.write("F")
		w.fnSig()
	case 'D':
		w.pos++
		w.write("D")
		w.binder()
		for !w.bad && w.peek() != 'E' {
			if w.pos >= len(w.in) {
				w.fail()
				return
			}
			w.dynTrait()
		}
		w.expect('E')
		if w.peek() != 'L' {
			w.fail()
			return
		}
		w.lifetime()
	case 'B':
		w.backref()
	default:
		w.fail()
	}
}

func (w *v0Writer) typesUntilE() {
	for !w.bad && w.peek() != 'E' {
		if w.pos >= len(w.in) {
			w.fail()
			return
		}
		w.typ()
	}
	w.expect('E')
}

// lifetime reads an optional "L" <base-62-number>.
func (w *v0Writer) lifetime() {
	if w.peek() == 'L' {
		from := w.pos
		w.pos++
		w.base62()
		w.copy(from)
	}
}

// binder reads an optional "G" <base-62-number>.
func (w *v0Writer) binder() {
	if w.peek() == 'G' {
		from := w.pos
		w.pos++
		w.base62()
		w.copy(from)
	}
}

// fnSig reads [<binder>] ["U"] ["K" <abi>] {<type>} "E" <type>.
func (w *v0Writer) fnSig() {
	w.binder()
	if w.peek() == 'U' {
		w.pos++
		w.write("U")
	}
	if w.peek() == 'K' {
		w.pos++
		w.write("K")
		if w.peek() == 'C' {
			w.pos++
			w.write("C")
		} else {
			w.undisambiguated()
		}
	}
	w.typesUntilE()
	w.typ()
}

// dynTrait reads <path> {"p" <undisambiguated-identifier> <type>}; the path may be a
// generic one ("I" <path> {<generic-arg>} "E") or a backref to one.
func (w *v0Writer) dynTrait() {
	w.path()
	for !w.bad && w.peek() == 'p' {
		w.pos++
		w.write("p")
		w.undisambiguated()
		w.typ()
	}
}

// constant reads <const>: a backref, the placeholder "p", or an integer, bool or char type
// and its hex value.
func (w *v0Writer) constant() {
	start, ok := w.begin()
	if !ok {
		return
	}
	defer w.end(start)
	c := w.in[w.pos]
	switch {
	case c == 'B':
		w.backref()
		return
	case c == 'p':
		w.pos++
		w.write("p")
		return
	case strings.IndexByte("aslxnihtmyojbc", c) < 0:
		w.fail()
		return
	}
	from := w.pos
	w.pos++
	if strings.IndexByte("aslxni", c) >= 0 && w.peek() == 'n' {
		w.pos++
	}
	for w.pos < len(w.in) && w.in[w.pos] != '_' {
		if d := w.in[w.pos]; !isDigit(d) && (d < 'a' || d > 'f') {
			w.fail()
			return
		}
		w.pos++
	}
	if w.pos >= len(w.in) {
		w.fail()
		return
	}
	w.pos++
	w.copy(from)
}
