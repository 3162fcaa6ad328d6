// Package symbolizecmd implements `symbolizer symbolize` and `symbolizer debuginfo inspect`: the
// engine on local files, with output that diffs line by line against llvm-symbolizer 14.
package symbolizecmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
	Addresses   []string `arg:"" optional:"" help:"ELF virtual addresses, hex with 0x or decimal (as llvm-symbolizer reads them). Read from stdin, one per line, when none are given."`
}

// Run resolves the addresses and prints them.
func (c *Cmd) Run() error {
	return c.run(os.Stdin, os.Stdout)
}

func (c *Cmd) run(stdin io.Reader, stdout io.Writer) error {
	ix, err := c.loadIndex()
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdout, 1<<16)
	defer w.Flush()
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
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		p.one(line)
		if p.json {
			w.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read addresses: %w", err)
	}
	return w.Flush()
}

func (c *Cmd) loadIndex() (*index.Index, error) {
	b, err := debuginfo.Open(c.Obj, debuginfo.Options{DebugFile: c.DebugFile, DebugDirs: c.DebugDir})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	return b.Index()
}

// ParseAddress reads an address the way llvm-symbolizer does: 0x-prefixed hex, else decimal.
func ParseAddress(s string) (uint64, error) {
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		return strconv.ParseUint(h, 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}

type printer struct {
	w       *bufio.Writer
	module  string
	json    bool
	inlines bool
	ix      *index.Index
	frames  []index.Frame
	buf     bytes.Buffer
}

// jsonFrame spells a frame the way llvm-symbolizer 14's JSON does, field for field.
type jsonFrame struct {
	Column        uint32
	Discriminator uint32
	FileName      string
	FunctionName  string
	Line          uint32
	StartAddress  string
	StartFileName string
	StartLine     uint32
}

type jsonResult struct {
	Address    string      `json:"Address"`
	ModuleName string      `json:"ModuleName"`
	Symbol     []jsonFrame `json:"Symbol"`
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
	frames := p.frames
	if !p.inlines && len(frames) > 1 {
		// Without inlines llvm-symbolizer names the outermost function at the innermost line.
		f := frames[len(frames)-1]
		f.File, f.Line, f.Column = frames[0].File, frames[0].Line, frames[0].Column
		frames = []index.Frame{f}
	}
	if p.json {
		res := jsonResult{Address: fmt.Sprintf("0x%x", addr), ModuleName: p.module}
		for _, f := range frames {
			res.Symbol = append(res.Symbol, toJSON(f))
		}
		if len(res.Symbol) == 0 {
			res.Symbol = []jsonFrame{{}}
		}
		p.writeJSON(res)
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

func toJSON(f index.Frame) jsonFrame {
	jf := jsonFrame{
		Column:        f.Column,
		FileName:      f.File,
		FunctionName:  f.Function,
		Line:          f.Line,
		StartFileName: f.StartFile,
		StartLine:     f.StartLine,
	}
	if f.StartAddress != 0 {
		jf.StartAddress = fmt.Sprintf("0x%x", f.StartAddress)
	}
	return jf
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
	p.w.Write(bytes.TrimSuffix(p.buf.Bytes(), []byte("\n")))
}
