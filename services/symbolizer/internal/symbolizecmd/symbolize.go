// Package symbolizecmd implements `symbolizer symbolize` and `symbolizer debuginfo inspect`: the
// engine on local files, with output that diffs line by line against llvm-symbolizer 14.
package symbolizecmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// Cmd is `symbolizer symbolize`.
type Cmd struct {
	Obj         string   `help:"ELF binary whose addresses to resolve." required:"" placeholder:"FILE"`
	DebugFile   string   `help:"Separate debug file to use instead of searching for one." type:"existingfile" placeholder:"FILE"`
	DebugDir    []string `help:"Directory to search for separate debug files, by build ID (.build-id/ab/cdef.debug) and by .gnu_debuglink; repeatable." placeholder:"DIR"`
	OutputStyle string   `help:"LLVM (function, then file:line:column, per frame) or JSON (llvm-symbolizer 14's JSON: an array for addresses given as arguments, one object per line for addresses read from stdin)." enum:"LLVM,JSON" default:"LLVM" name:"output-style"`
	Inlines     bool     `help:"Print every inlined frame, innermost first; --no-inlines prints only the innermost function." default:"true" negatable:""`
	CacheDir    string   `help:"Keep each binary's index here, so the next run on the same binary loads it instead of building it (default: profsym/index under the user's cache directory)." placeholder:"DIR" env:"SYMBOLIZER_CACHE_DIR"`
	NoCache     bool     `help:"Neither read nor write the index cache." name:"no-cache"`
	CacheSize   int64    `help:"Largest total size of the index cache in bytes; the least recently used indexes are removed beyond it." default:"2147483648" placeholder:"BYTES"`
	CPUProfile  string   `help:"Write a Go CPU profile of the run to this file." hidden:"" placeholder:"FILE"`
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
	return c.run(os.Stdin, os.Stdout)
}

func (c *Cmd) run(stdin io.Reader, stdout io.Writer) error {
	ix, done, err := c.loadIndex()
	if err != nil {
		return err
	}
	defer done()
	w := bufio.NewWriterSize(stdout, 1<<16)
	p := printer{w: w, module: c.Obj, json: c.OutputStyle == "JSON", inlines: c.Inlines, ix: ix}

	if len(c.Addresses) > 0 {
		if p.json {
			w.WriteByte('[')
		}
		for i, a := range c.Addresses {
			if p.json && i > 0 {
				w.WriteByte(',')
			}
			p.one(a)
		}
		if p.json {
			w.WriteString("]\n")
		}
		return w.Flush()
	}
	// Programs drive llvm-symbolizer one address at a time (go tool pprof does), waiting for
	// each answer: flush whenever the input read so far is used up, so they get it, while a
	// piped file is still answered in large writes.
	// Addresses are answered in batches of what has been read (see printer.batch).
	r := bufio.NewReaderSize(stdin, 1<<16)
	batch := make([]string, 0, batchSize)
	for {
		line, err := r.ReadString('\n')
		if len(line) > 1<<20 {
			p.batch(batch)
			return errors.Join(fmt.Errorf("read addresses: a line of %d bytes", len(line)), w.Flush())
		}
		if text := strings.TrimSpace(line); text != "" {
			batch = append(batch, text)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			// What was symbolized before the read failed is still printed.
			p.batch(batch)
			return errors.Join(fmt.Errorf("read addresses: %w", err), w.Flush())
		}
		if len(batch) == batchSize || r.Buffered() == 0 {
			p.batch(batch)
			batch = batch[:0]
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
	p.batch(batch)
	return w.Flush()
}

// buildGCPercent is the GOGC in force while the command builds an index (see loadIndex).
const buildGCPercent = 50

// batchSize is how many addresses are looked up together; see printer.batch.
const batchSize = 64

// loadIndex returns what answers the addresses, and what to call when done with it: the
// binary's index from the cache, else a stripped Go binary's pclntab read lazily (cheaper than
// any index for a command-line run; it reads the file as it goes), else the index, built and
// cached.
func (c *Cmd) loadIndex() (debuginfo.Lookuper, func(), error) {
	b, err := debuginfo.Open(c.Obj, debuginfo.Options{DebugFile: c.DebugFile, DebugDirs: c.DebugDir})
	if err != nil {
		return nil, nil, err
	}
	// Only read from: a failing close loses nothing.
	closeBinary := func() { _ = b.Close() }
	cache, key := c.cache(b)
	if cache != nil {
		if ix := cache.load(key); ix != nil {
			// A smaller --cache-size takes effect on the next run, hit or miss.
			if err := cache.evict(); err != nil {
				c.warn(err)
			}
			closeBinary()
			return ix, func() {}, nil
		}
	}
	if lazy, ok := b.LazyLookup(); ok {
		return lazy, closeBinary, nil
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
	if cache != nil {
		if err := cache.store(key, ix); err != nil {
			c.warn(err)
		}
	}
	return ix, func() {}, nil
}

// cache returns the index cache and b's key in it, or nil when caching is off or impossible.
func (c *Cmd) cache(b *debuginfo.Binary) (*indexCache, string) {
	if c.NoCache {
		return nil, ""
	}
	dir := c.CacheDir
	if dir == "" {
		if dir = DefaultCacheDir(); dir == "" {
			return nil, ""
		}
	}
	cache := &indexCache{dir: dir, maxBytes: c.CacheSize}
	key, err := cache.key(b)
	if err != nil {
		c.warn(err)
		return nil, ""
	}
	return cache, key
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

type printer struct {
	w       *bufio.Writer
	module  string
	json    bool
	inlines bool
	ix      debuginfo.Lookuper
	frames  []index.Frame
	buf     bytes.Buffer
	out     []byte

	// batch's buffers.
	addrs []uint64
	valid []bool
	refs  []index.FrameRef
	ends  []int
	sink  uint64
}

type jsonError struct {
	Error      struct{ Message string } `json:"Error"`
	ModuleName string                   `json:"ModuleName"`
}

func (p *printer) one(text string) {
	addr, err := ParseAddress(text)
	if err != nil {
		if p.json {
			var e jsonError
			e.Error.Message = "unable to parse arguments: " + text
			e.ModuleName = p.module
			p.writeJSON(e)
		} else {
			fmt.Fprintf(p.w, "%s\n\n", text)
		}
		return
	}
	p.frames = p.ix.AppendLookup(p.frames[:0], addr)
	p.write(addr, p.frames)
}

// batch answers texts, one address each, in order, each JSON answer on its own line. With an
// index the addresses' lookups run together: Touch and TouchStrings read what the lookups and
// the output will read for all of them first, so that the cache misses of different addresses
// overlap, where one address's misses come one after another (on a 150 MB Go binary's index,
// measured by BenchmarkWarm, this halves the CPU time per address).
func (p *printer) batch(texts []string) {
	ix, ok := p.ix.(*index.Index)
	if !ok || len(texts) < 2 {
		for _, t := range texts {
			p.one(t)
			if p.json {
				p.w.WriteByte('\n')
			}
		}
		return
	}
	p.addrs, p.valid = p.addrs[:0], p.valid[:0]
	for _, t := range texts {
		a, err := ParseAddress(t)
		p.valid = append(p.valid, err == nil)
		if err == nil {
			p.addrs = append(p.addrs, a)
		}
	}
	p.sink += ix.Touch(p.addrs)
	p.refs, p.ends = p.refs[:0], p.ends[:0]
	for _, a := range p.addrs {
		p.refs = ix.AppendLookupRefs(p.refs, a)
		p.ends = append(p.ends, len(p.refs))
	}
	p.sink += ix.TouchStrings(p.refs)
	k, from := 0, 0
	for i, t := range texts {
		if !p.valid[i] {
			p.one(t)
		} else {
			p.frames = p.frames[:0]
			for _, r := range p.refs[from:p.ends[k]] {
				p.frames = append(p.frames, ix.Frame(r))
			}
			p.write(p.addrs[k], p.frames)
			from = p.ends[k]
			k++
		}
		if p.json {
			p.w.WriteByte('\n')
		}
	}
}

// write prints the answer for addr from its frames.
func (p *printer) write(addr uint64, frames []index.Frame) {
	if !p.inlines && len(frames) > 1 {
		// Without inlines llvm-symbolizer names the outermost function at the innermost line.
		f := frames[len(frames)-1]
		f.File, f.Line, f.Column = frames[0].File, frames[0].Line, frames[0].Column
		frames = []index.Frame{f}
	}
	if p.json {
		p.writeResult(addr, frames)
		return
	}
	if len(frames) == 0 {
		p.w.WriteString("??\n??:0:0\n\n")
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
	p.w.WriteByte('\n')
}

// writeResult writes one address's answer the way llvm-symbolizer 14's JSON does, field for
// field and in its field order. It is written by hand: encoding/json's reflection cost more than
// the lookup itself on large batches.
func (p *printer) writeResult(addr uint64, frames []index.Frame) {
	b := p.out[:0]
	b = append(b, `{"Address":"0x`...)
	b = strconv.AppendUint(b, addr, 16)
	b = append(b, `","ModuleName":`...)
	b = appendJSONString(b, p.module)
	b = append(b, `,"Symbol":[`...)
	if len(frames) == 0 {
		frames = []index.Frame{{}}
	}
	for i, f := range frames {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Column":`...)
		b = strconv.AppendUint(b, uint64(f.Column), 10)
		b = append(b, `,"Discriminator":0,"FileName":`...)
		b = appendJSONString(b, f.File)
		b = append(b, `,"FunctionName":`...)
		b = appendJSONString(b, f.Function)
		b = append(b, `,"Line":`...)
		b = strconv.AppendUint(b, uint64(f.Line), 10)
		b = append(b, `,"StartAddress":"`...)
		if f.StartAddress != 0 {
			b = append(b, "0x"...)
			b = strconv.AppendUint(b, f.StartAddress, 16)
		}
		b = append(b, `","StartFileName":`...)
		b = appendJSONString(b, f.StartFile)
		b = append(b, `,"StartLine":`...)
		b = strconv.AppendUint(b, uint64(f.StartLine), 10)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	p.w.Write(b)
	p.out = b
}

// appendJSONString quotes s as encoding/json does with HTML escaping off (llvm does not escape
// the <, > and & of C++ names either). Plain ASCII, nearly every name and path, is copied.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if jsonSpecial[s[i]] {
			var sb bytes.Buffer
			enc := json.NewEncoder(&sb)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(s); err != nil {
				return append(b, `""`...)
			}
			return append(b, bytes.TrimSuffix(sb.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// jsonSpecial marks the bytes appendJSONString leaves to encoding/json: one table load per
// byte where four comparisons were, on the loop that reads every name and path written.
var jsonSpecial = func() (t [256]bool) {
	for c := range t {
		t[c] = c < 0x20 || c == '"' || c == '\\' || c >= 0x80
	}
	return t
}()

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
	p.w.Write(bytes.TrimSuffix(p.buf.Bytes(), []byte("\n")))
}
