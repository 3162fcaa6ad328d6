// Package kallsyms symbolizes kernel addresses on the node from /proc/kallsyms: the kernel's
// and loaded modules' function symbols.
package kallsyms

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Kernel is the module name of symbols of the kernel image itself.
const Kernel = "vmlinux"

const (
	maxLineBytes = 4096
	// maxSymbols bounds what a hostile or corrupt file can make the table hold (a kernel
	// with every module loaded has a few hundred thousand).
	maxSymbols = 4 << 20
	maxModules = 1 << 16
)

// Symbol is the answer to a lookup.
type Symbol struct {
	Addr   uint64 // the symbol's start
	Name   string
	Module string // Kernel, or the module's name
}

// entry is packed: a table of some 100,000 symbols costs about 2 MB plus the names, which
// matters for a collector held to 50 MB.
type entry struct {
	addr    uint64
	nameOff uint32
	nameLen uint16
	module  uint16
}

// Table is a sorted symbol table. It is immutable and safe for concurrent use.
type Table struct {
	entries []entry
	names   []byte
	modules []string
}

// ErrRestricted marks a kallsyms whose addresses all read as zero (kptr_restrict, or a
// reader without CAP_SYSLOG).
var ErrRestricted = errors.New("kallsyms addresses are hidden (kernel.kptr_restrict or missing CAP_SYSLOG)")

// Load reads the table from path (/proc/kallsyms).
func Load(path string) (*Table, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer fh.Close()
	t, err := Parse(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse reads kallsyms lines ("ffffffff81000000 T _stext" or
// "ffffffffc0201000 t func\t[module]"), keeping text symbols.
func Parse(r io.Reader) (*Table, error) {
	t := &Table{modules: []string{Kernel}}
	modIndex := map[string]uint16{Kernel: 0}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxLineBytes)
	lines, nonzero := 0, false
	for sc.Scan() {
		lines++
		line := sc.Text()
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("kallsyms line %d: %d fields, want at least 3", lines, len(fields))
		}
		addr, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("kallsyms line %d: address %q: %w", lines, fields[0], err)
		}
		if len(fields[1]) != 1 {
			return nil, fmt.Errorf("kallsyms line %d: type %q", lines, fields[1])
		}
		switch fields[1][0] {
		case 't', 'T', 'w', 'W':
		default:
			continue
		}
		if addr != 0 {
			nonzero = true
		}
		name := fields[2]
		if len(name) > 0xffff {
			return nil, fmt.Errorf("kallsyms line %d: name of %d bytes", lines, len(name))
		}
		mod := uint16(0)
		if len(fields) >= 4 {
			m := strings.Trim(fields[3], "[]")
			idx, ok := modIndex[m]
			if !ok {
				if len(t.modules) >= maxModules {
					return nil, fmt.Errorf("kallsyms: more than %d modules", maxModules)
				}
				idx = uint16(len(t.modules))
				modIndex[m] = idx
				t.modules = append(t.modules, m)
			}
			mod = idx
		}
		if len(t.entries) >= maxSymbols {
			return nil, fmt.Errorf("kallsyms: more than %d symbols", maxSymbols)
		}
		if uint64(len(t.names))+uint64(len(name)) > 0xffffffff {
			return nil, fmt.Errorf("kallsyms: names exceed 4 GiB")
		}
		t.entries = append(t.entries, entry{addr: addr, nameOff: uint32(len(t.names)), nameLen: uint16(len(name)), module: mod})
		t.names = append(t.names, name...)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kallsyms: %w", err)
	}
	if len(t.entries) == 0 {
		return nil, errors.New("kallsyms: no text symbols")
	}
	if !nonzero {
		return nil, ErrRestricted
	}
	// Stable, so that of aliases at one address (_stext, _text) the first listed wins.
	sort.SliceStable(t.entries, func(i, j int) bool { return t.entries[i].addr < t.entries[j].addr })
	t.entries = t.entries[:len(t.entries):len(t.entries)]
	return t, nil
}

// Len is the number of text symbols.
func (t *Table) Len() int { return len(t.entries) }

// Lookup returns the symbol that holds addr: the last one starting at or below it. ok is
// false below the first symbol. Beyond the end of the last function of a region the answer
// is that function, as with every kallsyms-based symbolizer: kallsyms has no sizes.
func (t *Table) Lookup(addr uint64) (Symbol, bool) {
	i := sort.Search(len(t.entries), func(i int) bool { return t.entries[i].addr > addr })
	if i == 0 {
		return Symbol{}, false
	}
	// Of several symbols at the same address, the first listed.
	j := i - 1
	for j > 0 && t.entries[j-1].addr == t.entries[j].addr {
		j--
	}
	e := t.entries[j]
	return Symbol{
		Addr:   e.addr,
		Name:   string(t.names[e.nameOff : e.nameOff+uint32(e.nameLen)]),
		Module: t.modules[e.module],
	}, true
}

// Address returns the address of a symbol of the kernel image by name (the lowest, should
// the name be there twice). It scans the table: it is for the few names read once at start.
func (t *Table) Address(name string) (uint64, bool) {
	for _, e := range t.entries {
		if e.module == 0 && string(t.names[e.nameOff:e.nameOff+uint32(e.nameLen)]) == name {
			return e.addr, true
		}
	}
	return 0, false
}
