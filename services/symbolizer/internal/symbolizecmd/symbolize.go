// Package symbolizecmd implements `symbolizer symbolize` and `symbolizer debuginfo inspect`: the
// engine on local files, with output that diffs line by line against llvm-symbolizer 14.
package symbolizecmd

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"unsafe"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/debugfile"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/services/symbolizer/internal/debuginfod"
)

// Cmd is `symbolizer symbolize`.
type Cmd struct {
	Obj            string   `help:"ELF binary whose addresses to resolve." required:"" placeholder:"FILE"`
	DebugFile      string   `help:"Separate debug file to use instead of searching for one." type:"existingfile" placeholder:"FILE"`
	DebugDir       []string `help:"Directory to search for separate debug files, by build ID (.build-id/ab/cdef.debug) and by .gnu_debuglink; repeatable. Default: /usr/lib/debug, where distributions install them, as llvm-symbolizer and GDB search; a --debug-dir given replaces it, and an empty one (--debug-dir=) searches none." placeholder:"DIR"`
	DebuginfodURLs string   `name:"debuginfod-urls" env:"DEBUGINFOD_URLS" help:"debuginfod servers to ask, in turn, for the separate debug file of a binary that has neither DWARF nor a Go pclntab and whose debug file is not on disk, and for a missing dwz supplementary file; space-separated, as elfutils and GDB read DEBUGINFOD_URLS. Fetched files are kept by build ID under the cache directory." placeholder:"URLS"`
	OutputStyle    string   `help:"LLVM (function, then file:line:column, per frame) or JSON (llvm-symbolizer 14's JSON: an array for addresses given as arguments, one object per line for addresses read from stdin)." enum:"LLVM,JSON" default:"LLVM" name:"output-style"`
	Inlines        bool     `help:"Print every inlined frame, innermost first; --no-inlines prints only the innermost function." default:"true" negatable:""`
	CacheDir       string   `help:"Keep each binary's index here, so the next run on the same binary loads it instead of building it (default: profsym/index under the user's cache directory)." placeholder:"DIR" env:"SYMBOLIZER_CACHE_DIR"`
	NoCache        bool     `help:"Neither read nor write the index cache." name:"no-cache"`
	CacheSize      int64    `help:"Largest total size of the cache directory in bytes, indexes and files fetched from debuginfod together; the least recently used are removed beyond it." default:"2147483648" placeholder:"BYTES"`
	CPUProfile     string   `help:"Write a Go CPU profile of the run to this file." hidden:"" placeholder:"FILE"`
	AllocProfile   string   `help:"Write a Go allocation profile of the run (every allocation site, sampled) to this file." hidden:"" placeholder:"FILE"`
	// Stderr receives the cache's warnings (a cache that cannot be written is not an error).
	Stderr    io.Writer `kong:"-"`
	Addresses []string  `arg:"" optional:"" help:"ELF virtual addresses, hex with 0x or decimal (as llvm-symbolizer reads them). Read from stdin, one per line, when none are given."`
}

// Run resolves the addresses and prints them.
func (c *Cmd) Run() error {
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	err := c.run(os.Stdin, os.Stdout)
	if c.AllocProfile != "" {
		f, perr := os.Create(c.AllocProfile)
		if perr == nil {
			perr = pprof.Lookup("allocs").WriteTo(f, 0)
			if cerr := f.Close(); perr == nil {
				perr = cerr
			}
		}
		if perr != nil && err == nil {
			err = fmt.Errorf("allocation profile: %w", perr)
		}
	}
	return err
}

func (c *Cmd) run(stdin io.Reader, stdout io.Writer) error {
	ix, done, err := c.loadIndex()
	if err != nil {
		return err
	}
	defer done()
	w := newOutput(stdout)
	p := printer{w: w, module: c.Obj, json: c.OutputStyle == "JSON", inlines: c.Inlines, ix: ix}

	if len(c.Addresses) > 0 {
		if p.json {
			w.putByte('[')
		}
		for i, a := range c.Addresses {
			if p.json && i > 0 {
				w.putByte(',')
			}
			p.one(a)
		}
		if p.json {
			w.putString("]\n")
		}
		return errors.Join(w.Flush(), c.lookupErr(ix))
	}
	// Programs drive llvm-symbolizer one address at a time (go tool pprof does), waiting for
	// each answer: flush whenever the input read so far is used up, so they get it, while a
	// piped file is still answered in large writes.
	// Addresses are answered in batches of what has been read (see printer.flushBatch).
	r := bufio.NewReaderSize(stdin, 1<<16)
	for {
		// ReadSlice, not ReadString: the line is parsed where the reader holds it, with no
		// string made of it unless it is no address.
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			p.flushBatch()
			return errors.Join(fmt.Errorf("read addresses: a line longer than %d bytes", r.Size()), w.Flush())
		}
		if text := bytes.TrimSpace(line); len(text) > 0 {
			p.add(text)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			// What was symbolized before the read failed is still printed.
			p.flushBatch()
			return errors.Join(fmt.Errorf("read addresses: %w", err), w.Flush())
		}
		if p.pending() == batchSize || r.Buffered() == 0 {
			p.flushBatch()
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	p.flushBatch()
	return errors.Join(w.Flush(), c.lookupErr(ix))
}

// lookupErr is why ix stopped answering during the run, if it is a lazy reader that did (the
// binary shrank while it was read).
func (c *Cmd) lookupErr(ix debuginfo.Lookuper) error {
	if e, ok := ix.(interface{ Err() error }); ok {
		if err := e.Err(); err != nil {
			return fmt.Errorf("%s: %w", c.Obj, err)
		}
	}
	return nil
}

// buildGCPercent is the GOGC in force while the command builds an index (see loadIndex).
const buildGCPercent = 50

// batchSize is how many addresses are looked up together; see printer.flushBatch.
const batchSize = 64

// loadIndex returns what answers the addresses, and what to call when done with it: the
// binary's index from the cache, else a stripped Go binary's pclntab read lazily (cheaper than
// any index for a command-line run; it reads the file as it goes), else the index, built and
// cached.
func (c *Cmd) loadIndex() (debuginfo.Lookuper, func(), error) {
	servers := fromDebuginfod{urls: debuginfod.ParseURLs(c.DebuginfodURLs), cacheDir: c.cacheDir(), warn: c.warn}
	b, _, done, err := servers.open(c.Obj, debuginfo.Options{DebugFile: c.DebugFile, DebugDirs: debugDirs(c.DebugDir)})
	if err != nil {
		done()
		return nil, nil, err
	}
	// Only read from: a failing close loses nothing.
	closeBinary := func() { _ = b.Close(); done() }
	cache, key := c.cache(b)
	if cache != nil {
		if ix, warnings := cache.load(key); ix != nil {
			// A smaller --cache-size takes effect on the next run, hit or miss.
			if err := cache.evict(); err != nil {
				c.warn(err)
			}
			c.warnBuild(warnings)
			c.warnFidelity(ix.Fidelity())
			closeBinary()
			return ix, func() {}, nil
		}
	}
	if lazy, ok := b.LazyLookup(); ok {
		restore := lazyGC(b.Info().Size)
		return lazy, func() { restore(); closeBinary() }, nil
	}
	defer closeBinary()
	// The index build is the peak of a run's memory: millions of rows collected, sorted, then
	// copied into the index. At the default GOGC the heap may grow to twice what the last
	// collection left live before the next one, and where a large transient lands between two
	// collections decides the peak: on MinIO (150 MB) it ranged over 342-404 MB from run to
	// run, 0.84-0.99x llvm-symbolizer's 407 MB. At 50 it stays within 289-331 MB for the same
	// CPU time within noise. A one-shot command may set this; a library used by a server may
	// not, so the engine leaves it alone.
	defer debug.SetGCPercent(debug.SetGCPercent(buildGCPercent))
	ix, err := b.Index()
	if err != nil {
		return nil, nil, err
	}
	warnings := b.Info().Warnings
	c.warnBuild(warnings)
	c.warnFidelity(ix.Fidelity())
	if cache != nil {
		if err := cache.store(key, ix, warnings); err != nil {
			c.warn(err)
		}
	}
	return ix, func() {}, nil
}

// lazyMemoryLimit is the least Go memory limit in force while a stripped Go binary is read
// lazily; see lazyGC.
const lazyMemoryLimit = 64 << 20

// lazyGC sets the collector for reading a stripped Go binary lazily and returns what puts the
// previous settings back. Nearly everything that reading allocates stays live to the end (the
// decoded functions, kept for the addresses that follow), so a collection finds little to free:
// at the default GOGC the heap's doubling from 4 MB took six collections for the 20,000
// addresses of bench/symbolize on stripped MinIO, a third of the run's CPU time. The collector
// is off, with a memory limit instead: it collects only where the heap nears the larger of
// lazyMemoryLimit and the file's size, which is about what decoding every function keeps
// (MinIO: 112 MB). With 300,000 addresses, which decode nearly all of MinIO's functions, that
// also peaked lower than the default GOGC did, which lets the heap reach twice what is live.
// A one-shot command may set this; the engine leaves it alone.
func lazyGC(fileSize int64) (restore func()) {
	limit := debug.SetMemoryLimit(max(lazyMemoryLimit, fileSize))
	percent := debug.SetGCPercent(-1)
	return func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	}
}

// cache returns the index cache and b's key in it, or nil when caching is off or impossible.
func (c *Cmd) cache(b *debuginfo.Binary) (*indexCache, string) {
	dir := c.cacheDir()
	if dir == "" {
		return nil, ""
	}
	cache := &indexCache{dir: dir, maxBytes: c.CacheSize}
	key, err := cache.key(b)
	if err != nil {
		c.warn(err)
		return nil, ""
	}
	return cache, key
}

// cacheDir is the cache directory in force: --cache-dir, else the default; "" with
// --no-cache or when the user has no cache directory.
func (c *Cmd) cacheDir() string {
	if c.NoCache {
		return ""
	}
	return cacheDirOr(c.CacheDir)
}

// debugDirs is the --debug-dir list in force: the system's directory when none was given,
// none for an empty value.
func debugDirs(given []string) []string {
	if given == nil {
		return []string{debugfile.SystemDir}
	}
	var dirs []string
	for _, d := range given {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// warnBuild prints what the index's build skipped, as llvm-symbolizer warns of a .dwo or debug
// file it cannot read: otherwise a missing debug file looks like a binary without functions.
// A run that loads the index from the cache prints them too: its answers lack the same.
func (c *Cmd) warnBuild(warnings []string) {
	for _, w := range warnings {
		c.warn(fmt.Errorf("%s: %s", c.Obj, w))
	}
}

// warnFidelity says when the answers will lack files and lines because only a symbol table
// was found, and where to point the command at the debug information.
func (c *Cmd) warnFidelity(f index.Fidelity) {
	if f > index.FidelitySymbols {
		return
	}
	if c.DebugFile != "" {
		c.warn(fmt.Errorf("neither %s nor its debug file %s has DWARF or a Go pclntab: answers name functions from the symbol table, without files or lines", c.Obj, c.DebugFile))
		return
	}
	searched := "no directory (--debug-dir=)"
	if dirs := debugDirs(c.DebugDir); len(dirs) > 0 {
		searched = strings.Join(dirs, ", ")
	}
	if urls := debuginfod.ParseURLs(c.DebuginfodURLs); len(urls) > 0 {
		searched += ", and on the debuginfod servers " + strings.Join(urls, " ")
	}
	c.warn(fmt.Errorf("%s has no DWARF and no Go pclntab, and no separate debug file for it was found "+
		"(searched by build ID and .gnu_debuglink in %s): answers name functions from its symbol table, "+
		"without files or lines; give the debug file with --debug-file or its directory with --debug-dir", c.Obj, searched))
}

func (c *Cmd) warn(err error) {
	w := c.Stderr
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, "symbolizer symbolize: %v\n", err)
}

// ParseAddress reads an address the way llvm-symbolizer does: 0x-prefixed hex, else decimal.
func ParseAddress(s string) (uint64, error) {
	// Not strings.ToLower: it copies every address with an upper-case digit, and ParseUint
	// reads both cases of hex digits anyway.
	if len(s) > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		return strconv.ParseUint(s[2:], 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}

// parseAddressBytes is ParseAddress on a line as read, without making a string of it: hex
// of up to 16 digits and decimal of up to 19 are read here, anything else by ParseAddress.
func parseAddressBytes(b []byte) (uint64, bool) {
	var v uint64
	switch {
	case len(b) > 2 && len(b) <= 18 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X'):
		for _, c := range b[2:] {
			d := hexDigit[c]
			if d > 15 {
				return 0, false
			}
			v = v<<4 | uint64(d)
		}
		return v, true
	case len(b) > 0 && len(b) <= 19 && b[0] != '0' || len(b) == 1:
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + uint64(c-'0')
		}
		return v, true
	}
	v, err := ParseAddress(string(b))
	return v, err == nil
}

// hexDigit maps a byte to its hex digit's value, and every other byte to 0xff.
var hexDigit = func() (t [256]byte) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = byte(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			t[c] = byte(c - 'A' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

type printer struct {
	w       *output
	module  string
	json    bool
	inlines bool
	ix      debuginfo.Lookuper
	frames  []index.Frame
	buf     bytes.Buffer

	// The batch read so far (see add and flushBatch): per line, whether it is an address;
	// the addresses; the lines that are not, as read.
	valid []bool
	addrs []uint64
	bad   []string

	// moduleJSON is what follows every answer's address: the module's name, quoted, and
	// the start of the frames (made on first use).
	moduleJSON []byte

	// plain is what appendString knows of the index's strings, by ID.
	plain []plainness

	// flushBatch's buffers.
	refs []index.FrameRef
	ends []int
	sink uint64
}

type jsonError struct {
	Error      struct{ Message string } `json:"Error"`
	ModuleName string                   `json:"ModuleName"`
}

// one answers text, an address given as an argument.
func (p *printer) one(text string) {
	addr, err := ParseAddress(text)
	if err != nil {
		p.unparsable(text)
		return
	}
	p.answer(addr)
}

func (p *printer) unparsable(text string) {
	if p.json {
		var e jsonError
		e.Error.Message = "unable to parse arguments: " + text
		e.ModuleName = p.module
		p.writeJSON(e)
	} else {
		fmt.Fprintf(p.w, "%s\n\n", text)
	}
}

func (p *printer) answer(addr uint64) {
	p.frames = p.ix.AppendLookup(p.frames[:0], addr)
	p.writeRefs(addr, p.frames, nil)
}

// add queues one line read from stdin (trimmed, not empty) for flushBatch.
func (p *printer) add(text []byte) {
	addr, ok := parseAddressBytes(text)
	p.valid = append(p.valid, ok)
	if ok {
		p.addrs = append(p.addrs, addr)
	} else {
		p.bad = append(p.bad, string(text))
	}
}

// pending is how many lines add has queued.
func (p *printer) pending() int { return len(p.valid) }

// flushBatch answers the queued lines, in order, each JSON answer on its own line. With an
// index the addresses' lookups run together: Touch and TouchStrings read what the lookups and
// the output will read for all of them first, so that the cache misses of different addresses
// overlap, where one address's misses come one after another (on a 150 MB Go binary's index,
// measured by BenchmarkWarm, this halves the CPU time per address).
func (p *printer) flushBatch() {
	defer func() { p.valid, p.addrs, p.bad = p.valid[:0], p.addrs[:0], p.bad[:0] }()
	ix, ok := p.ix.(*index.Index)
	if !ok || len(p.valid) < 2 {
		k, j := 0, 0
		for _, v := range p.valid {
			if v {
				p.answer(p.addrs[k])
				k++
			} else {
				p.unparsable(p.bad[j])
				j++
			}
			if p.json {
				p.w.putByte('\n')
			}
		}
		return
	}
	p.sink += ix.Touch(p.addrs)
	p.refs, p.ends = p.refs[:0], p.ends[:0]
	for _, a := range p.addrs {
		p.refs = ix.AppendLookupRefs(p.refs, a)
		p.ends = append(p.ends, len(p.refs))
	}
	p.sink += ix.TouchStrings(p.refs)
	k, j, from := 0, 0, 0
	for _, v := range p.valid {
		if !v {
			p.unparsable(p.bad[j])
			j++
		} else {
			p.frames = p.frames[:0]
			refs := p.refs[from:p.ends[k]]
			for _, r := range refs {
				p.frames = append(p.frames, ix.Frame(r))
			}
			p.writeRefs(p.addrs[k], p.frames, refs)
			from = p.ends[k]
			k++
		}
		if p.json {
			p.w.putByte('\n')
		}
	}
}

// writeRefs prints the answer for addr from its frames; refs, when not nil, are the frames'
// string IDs in the index, which spare the JSON writer looking at strings it has seen.
func (p *printer) writeRefs(addr uint64, frames []index.Frame, refs []index.FrameRef) {
	if !p.inlines && len(frames) > 1 {
		// Without inlines llvm-symbolizer names the outermost function at the innermost line.
		f := frames[len(frames)-1]
		f.File, f.Line, f.Column = frames[0].File, frames[0].Line, frames[0].Column
		frames = []index.Frame{f}
		if refs != nil {
			r := refs[len(refs)-1]
			r.File, r.Line, r.Column = refs[0].File, refs[0].Line, refs[0].Column
			refs = []index.FrameRef{r}
		}
	}
	if p.json {
		p.writeResult(addr, frames, refs)
		return
	}
	if len(frames) == 0 {
		p.w.putString("??\n??:0:0\n\n")
		return
	}
	for _, f := range frames {
		fn, file := f.Function, f.File
		if fn == "" {
			fn = "??"
		}
		if file == "" {
			file = "??"
		}
		fmt.Fprintf(p.w, "%s\n%s:%d:%d\n", fn, file, f.Line, f.Column)
	}
	p.w.putByte('\n')
}

// writeResult writes one address's answer the way llvm-symbolizer 14's JSON does, field for
// field and in its field order, straight into the output buffer. It is written by hand:
// encoding/json's reflection cost more than the lookup itself on large batches.
func (p *printer) writeResult(addr uint64, frames []index.Frame, refs []index.FrameRef) {
	b := p.w.buf
	b = append(b, `{"Address":"0x`...)
	b = appendHex(b, addr)
	if p.moduleJSON == nil {
		p.moduleJSON = append(appendJSONString([]byte(`","ModuleName":`), p.module), `,"Symbol":[`...)
	}
	b = append(b, p.moduleJSON...)
	if len(frames) == 0 {
		frames, refs = []index.Frame{{}}, nil
	}
	for i, f := range frames {
		if i > 0 {
			b = append(b, ',')
		}
		r := noRef
		if refs != nil {
			r = refs[i]
		}
		b = append(b, `{"Column":`...)
		b = appendDec(b, f.Column)
		b = append(b, `,"Discriminator":0,"FileName":`...)
		fileAt := len(b)
		b = p.appendString(b, f.File, r.File)
		fileEnd := len(b)
		b = append(b, `,"FunctionName":`...)
		b = p.appendString(b, f.Function, r.Function)
		b = append(b, `,"Line":`...)
		b = appendDec(b, f.Line)
		b = append(b, `,"StartAddress":"`...)
		if f.StartAddress != 0 {
			b = append(b, "0x"...)
			b = appendHex(b, f.StartAddress)
		}
		b = append(b, `","StartFileName":`...)
		if f.StartFile == f.File {
			// Most frames: the code is in the file that declares its function. The file
			// as quoted above is in cache; its string may not be by now.
			b = append(b, b[fileAt:fileEnd]...)
		} else {
			b = p.appendString(b, f.StartFile, r.StartFile)
		}
		b = append(b, `,"StartLine":`...)
		b = appendDec(b, f.StartLine)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	p.w.buf = b
	p.w.flushIfFull()
}

// noRef is the string IDs of a frame that has none: unknownID, whose strings appendString
// looks at.
var noRef = index.FrameRef{Function: unknownID, File: unknownID, StartFile: unknownID}

const unknownID = ^uint32(0)

// appendString is appendJSONString for string id of the index, remembering which strings
// are plain: names repeat from address to address, and reading one again to find it plain
// cost more than its lookup.
func (p *printer) appendString(b []byte, s string, id uint32) []byte {
	if id == unknownID {
		return appendJSONString(b, s)
	}
	if int(id) >= len(p.plain) {
		p.plain = append(p.plain, make([]plainness, int(id)+1-len(p.plain))...)
	}
	switch p.plain[id] {
	case isPlain:
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	case notPlain:
		return appendJSONString(b, s)
	}
	if jsonPlain(s) {
		p.plain[id] = isPlain
	} else {
		p.plain[id] = notPlain
	}
	return appendJSONString(b, s)
}

// appendHex appends v in lower-case hex without leading zeros, as strconv.AppendUint(b, v, 16)
// does; and appendDec v in decimal. Written out, they cost half of strconv's general path
// (about ten numbers per address: BenchmarkWarm).
func appendHex(b []byte, v uint64) []byte {
	var buf [16]byte
	i := len(buf)
	for {
		i--
		buf[i] = hexDigits[v&15]
		v >>= 4
		if v == 0 {
			return append(b, buf[i:]...)
		}
	}
}

func appendDec(b []byte, v uint32) []byte {
	var buf [10]byte
	i := len(buf)
	for v >= 100 {
		q := v / 100
		r := 2 * (v - 100*q)
		i -= 2
		buf[i], buf[i+1] = decPairs[r], decPairs[r+1]
		v = q
	}
	if v >= 10 {
		i -= 2
		buf[i], buf[i+1] = decPairs[2*v], decPairs[2*v+1]
	} else {
		i--
		buf[i] = byte('0' + v)
	}
	return append(b, buf[i:]...)
}

const (
	hexDigits = "0123456789abcdef"
	decPairs  = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" +
		"30313233343536373839" + "40414243444546474849" + "50515253545556575859" +
		"60616263646566676869" + "70717273747576777879" + "80818283848586878889" +
		"90919293949596979899"
)

// plainness is what the printer knows of a string: unseen, plain (written as it is between
// quotes), or not.
type plainness uint8

const (
	unseen plainness = iota
	isPlain
	notPlain
)

// appendJSONString quotes s as encoding/json does with HTML escaping off (llvm does not escape
// the <, > and & of C++ names either). Plain ASCII, nearly every name and path, is copied.
func appendJSONString(b []byte, s string) []byte {
	if !jsonPlain(s) {
		var sb bytes.Buffer
		enc := json.NewEncoder(&sb)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			return append(b, `""`...)
		}
		return append(b, bytes.TrimSuffix(sb.Bytes(), []byte("\n"))...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// jsonPlain reports whether encoding/json writes s as it is between quotes: no byte below
// 0x20 or from 0x80, no '"' and no '\\'. It tests 8 bytes at a time, on the loop that reads
// every name and path written (a table load per byte took a fifth of the warm rate's time).
func jsonPlain(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	var special uint64
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		b = b[8:]
		// (v - ones) &^ v has a high bit set if and only if v has a zero byte (exact as a
		// yes/no), and v = x ^ c repeated is zero where x's byte is c; x - 0x20 repeated,
		// &^ x, likewise finds a byte below 0x20 where x has no high bit, and x's own high
		// bits are the bytes from 0x80. Accumulated and tested once: names are short.
		q, bs := x^(ones*'"'), x^(ones*'\\')
		special |= x | (x-ones*0x20)&^x | (q-ones)&^q | (bs-ones)&^bs
	}
	if special&highs != 0 {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

func (p *printer) writeJSON(v any) {
	// llvm-symbolizer does not escape <, > and & the way encoding/json does by default, and C++
	// names are full of them.
	p.buf.Reset()
	enc := json.NewEncoder(&p.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(p.w, `{"Error":{"Message":%q}}`, err.Error())
		return
	}
	p.w.put(bytes.TrimSuffix(p.buf.Bytes(), []byte("\n")))
}

// output buffers what the command writes, like a bufio.Writer, and lets the JSON writer
// append to its buffer in place: the answers are about 460 bytes per address, and a copy of
// each into a bufio.Writer was a tenth of the warm rate's time.
type output struct {
	w   io.Writer
	buf []byte
	err error
}

// outputFlushAt is the buffered size at which output writes: large writes, as bufio's
// 64 KiB were.
const outputFlushAt = 64 << 10

func newOutput(w io.Writer) *output {
	return &output{w: w, buf: make([]byte, 0, outputFlushAt+4<<10)}
}

func (o *output) flushIfFull() {
	if len(o.buf) >= outputFlushAt {
		o.flush()
	}
}

// flush writes what is buffered; the first write error is kept in o.err.
func (o *output) flush() {
	if o.err == nil && len(o.buf) > 0 {
		_, o.err = o.w.Write(o.buf)
	}
	o.buf = o.buf[:0]
}

// Flush writes what is buffered and returns the first write error of the run.
func (o *output) Flush() error {
	o.flush()
	return o.err
}

// Write lets fmt print to the output; its error is the first of the run.
func (o *output) Write(p []byte) (int, error) {
	o.put(p)
	return len(p), o.err
}

// put, putString and putByte add to the output. They return nothing: the first write error
// is kept, and Flush, which every run ends with, returns it.
func (o *output) put(p []byte) {
	o.buf = append(o.buf, p...)
	o.flushIfFull()
}

func (o *output) putString(s string) {
	o.buf = append(o.buf, s...)
	o.flushIfFull()
}

func (o *output) putByte(c byte) {
	o.buf = append(o.buf, c)
	o.flushIfFull()
}
