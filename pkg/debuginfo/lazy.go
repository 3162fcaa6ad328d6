package debuginfo

import (
	"fmt"

	"github.com/profsym/profsym/pkg/debuginfo/gopclntab"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/debuginfo/symtab"
)

// Lookuper resolves ELF virtual addresses to frames, innermost first; *index.Index is one.
type Lookuper interface {
	AppendLookup(dst []index.Frame, addr uint64) []index.Frame
}

// LazyLookup returns a Lookuper that decodes only the functions it is asked about, when the
// binary's symbols are its Go pclntab and at most a .dynsym (a stripped Go binary): it answers
// as the index would, and for a few thousand addresses of a large binary it costs a fraction
// of building the index. ok is false for any other binary, whose index combines more sources.
//
// It reads the binary through a read-only mapping of the file, released by Close: the
// Lookuper must not be used after Close. Its Err method says why it stopped answering, if it
// did (the file shrank while mapped).
func (b *Binary) LazyLookup() (Lookuper, bool) {
	i := b.info
	if !i.GoPclntab || i.DWARF || i.DebugFile != "" || i.Symtab || i.MiniDebugInfo || b.file == nil {
		return nil, false
	}
	r, err := gopclntab.NewMappedResolver(b.elf.ELF(), b.file)
	if err != nil {
		return nil, false
	}
	// The .dynsym of a cgo binary names a few functions (crosscall2, _cgo_panic...); as in the
	// index, they answer only where pclntab has no function.
	bld := index.NewBuilder()
	if _, err := symtab.Load(b.elf.ELF(), bld); err != nil {
		_ = r.Close()
		return nil, false
	}
	syms, err := bld.Build()
	if err != nil {
		_ = r.Close()
		return nil, false
	}
	b.resolvers = append(b.resolvers, r)
	return &lazyGo{pclntab: r, syms: syms}, true
}

type lazyGo struct {
	pclntab *gopclntab.Resolver
	syms    *index.Index
}

func (l *lazyGo) AppendLookup(dst []index.Frame, addr uint64) []index.Frame {
	n := len(dst)
	if dst = l.pclntab.AppendLookup(dst, addr); len(dst) > n {
		return dst
	}
	return l.syms.AppendLookup(dst, addr)
}

// Err returns why the lookups stopped answering from the pclntab, or nil.
func (l *lazyGo) Err() error {
	if err := l.pclntab.Err(); err != nil {
		return fmt.Errorf("read pclntab: %w", err)
	}
	return nil
}
