// Package procmaps is the collector's knowledge of processes: their executable mappings from
// /proc/<pid>/maps, the files behind them (opened through /proc/<pid>/map_files or
// /proc/<pid>/root so containers work), the files' build IDs (computed once per file) and the
// conversion of sampled addresses into the ELF virtual-address space the reference OTel eBPF
// profiler reports.
package procmaps

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limits on what a maps file can make the parser hold: a process has at most
// vm.max_map_count (65530 by default) mappings, and a line is bounded by PATH_MAX plus the
// fixed fields.
const (
	maxEntries   = 1 << 17
	maxLineBytes = 8192
)

// Entry is one line of /proc/<pid>/maps.
type Entry struct {
	Start, End uint64
	Read       bool
	Write      bool
	Exec       bool
	Private    bool
	Offset     uint64
	DevMajor   uint32
	DevMinor   uint32
	Inode      uint64
	// Path is the pathname column without the " (deleted)" suffix; pseudo paths such as
	// "[vdso]" and "[heap]" are kept as they are, anonymous mappings have "".
	Path    string
	Deleted bool
}

// FileBacked reports whether the entry maps a regular file.
func (e Entry) FileBacked() bool {
	return e.Inode != 0 && strings.HasPrefix(e.Path, "/")
}

// ErrMalformed marks a maps line that does not parse.
var ErrMalformed = errors.New("malformed maps line")

// Parse reads a whole /proc/<pid>/maps file.
func Parse(r io.Reader) ([]Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLineBytes)
	var out []Entry
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if line == "" {
			continue
		}
		if len(out) >= maxEntries {
			return nil, fmt.Errorf("maps: more than %d entries", maxEntries)
		}
		e, err := ParseLine(line)
		if err != nil {
			return nil, fmt.Errorf("maps line %d: %w", n, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read maps: %w", err)
	}
	return out, nil
}

// ParseLine parses one maps line:
//
//	7f3c2a000000-7f3c2a021000 r-xp 00002000 fd:01 1234567    /usr/lib/x86_64-linux-gnu/libc.so.6
func ParseLine(line string) (Entry, error) {
	var e Entry
	rest := line
	field := func() string {
		rest = strings.TrimLeft(rest, " ")
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			f := rest
			rest = ""
			return f
		}
		f := rest[:i]
		rest = rest[i+1:]
		return f
	}
	rng, perms, off, dev, ino := field(), field(), field(), field(), field()
	lo, hi, ok := strings.Cut(rng, "-")
	if !ok {
		return e, fmt.Errorf("%w: address range %q", ErrMalformed, rng)
	}
	var err error
	if e.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return e, fmt.Errorf("%w: start %q", ErrMalformed, lo)
	}
	if e.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return e, fmt.Errorf("%w: end %q", ErrMalformed, hi)
	}
	if e.End <= e.Start {
		return e, fmt.Errorf("%w: empty range %q", ErrMalformed, rng)
	}
	if len(perms) != 4 {
		return e, fmt.Errorf("%w: permissions %q", ErrMalformed, perms)
	}
	e.Read, e.Write, e.Exec = perms[0] == 'r', perms[1] == 'w', perms[2] == 'x'
	e.Private = perms[3] == 'p'
	if e.Offset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return e, fmt.Errorf("%w: offset %q", ErrMalformed, off)
	}
	maj, min, ok := strings.Cut(dev, ":")
	if !ok {
		return e, fmt.Errorf("%w: device %q", ErrMalformed, dev)
	}
	ma, err1 := strconv.ParseUint(maj, 16, 32)
	mi, err2 := strconv.ParseUint(min, 16, 32)
	if err1 != nil || err2 != nil {
		return e, fmt.Errorf("%w: device %q", ErrMalformed, dev)
	}
	e.DevMajor, e.DevMinor = uint32(ma), uint32(mi)
	if e.Inode, err = strconv.ParseUint(ino, 10, 64); err != nil {
		return e, fmt.Errorf("%w: inode %q", ErrMalformed, ino)
	}
	// The path is the rest of the line after the padding; it may contain spaces.
	path := strings.TrimLeft(rest, " ")
	if p, ok := strings.CutSuffix(path, " (deleted)"); ok {
		path, e.Deleted = p, true
	}
	e.Path = path
	return e, nil
}
