package dwarfsym

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// lineFiles is the file table of one line program, with every entry already turned into the
// path llvm-symbolizer prints. debug/dwarf cleans joined paths (path.Join drops "..") and so
// disagrees with llvm on paths such as gcc's ".../12/../../../../include/c++/12/vector"; the
// header is therefore read here and the names composed the way llvm composes them.
type lineFiles struct {
	version int
	// files is indexed by the file number the line program and DW_AT_call_file use:
	// 0-based in DWARF 5; 1-based before (files[0] is then unused).
	files []string
	ok    []bool

	// The line program and the header fields that drive it.
	prog          []byte
	order         binary.ByteOrder
	compDir       string
	dirs          []string // DWARF 4 include directories, for DW_LNE_define_file
	minInst       uint8
	maxOps        uint8
	defaultIsStmt bool
	lineBase      int8
	lineRange     uint8
	opcodeBase    uint8
	stdLens       []byte
}

// name returns the path of file number i, or "" and false when i names no entry.
func (lf *lineFiles) name(i int64) (string, bool) {
	if lf == nil || i < 0 || i >= int64(len(lf.files)) || !lf.ok[i] {
		return "", false
	}
	return lf.files[i], true
}

type secReader struct {
	data  []byte
	off   int
	order binary.ByteOrder
	err   error
}

var errTruncated = errors.New("truncated")

func (r *secReader) fail() {
	if r.err == nil {
		r.err = errTruncated
	}
	r.off = len(r.data)
}

func (r *secReader) u8() uint8 {
	if r.off+1 > len(r.data) {
		r.fail()
		return 0
	}
	v := r.data[r.off]
	r.off++
	return v
}

func (r *secReader) u16() uint16 {
	if r.off+2 > len(r.data) {
		r.fail()
		return 0
	}
	v := r.order.Uint16(r.data[r.off:])
	r.off += 2
	return v
}

func (r *secReader) u32() uint32 {
	if r.off+4 > len(r.data) {
		r.fail()
		return 0
	}
	v := r.order.Uint32(r.data[r.off:])
	r.off += 4
	return v
}

func (r *secReader) u64() uint64 {
	if r.off+8 > len(r.data) {
		r.fail()
		return 0
	}
	v := r.order.Uint64(r.data[r.off:])
	r.off += 8
	return v
}

func (r *secReader) uN(n int) uint64 {
	switch n {
	case 1:
		return uint64(r.u8())
	case 2:
		return uint64(r.u16())
	case 3:
		if r.off+3 > len(r.data) {
			r.fail()
			return 0
		}
		b := r.data[r.off : r.off+3]
		r.off += 3
		if r.order == binary.BigEndian {
			return uint64(b[0])<<16 | uint64(b[1])<<8 | uint64(b[2])
		}
		return uint64(b[2])<<16 | uint64(b[1])<<8 | uint64(b[0])
	case 4:
		return uint64(r.u32())
	case 8:
		return r.u64()
	}
	r.fail()
	return 0
}

func (r *secReader) skip(n uint64) {
	if n > uint64(len(r.data)-r.off) {
		r.fail()
		return
	}
	r.off += int(n)
}

func (r *secReader) uleb() uint64 {
	var v uint64
	var shift uint
	for {
		if r.off >= len(r.data) {
			r.fail()
			return 0
		}
		b := r.data[r.off]
		r.off++
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			return v
		}
	}
}

func (r *secReader) cstr() string {
	s, ok := r.cstrView()
	if !ok {
		return ""
	}
	return strings.Clone(s)
}

// cstrView is cstr without the copy (see dieSecs.views).
func (r *secReader) cstrView() (string, bool) {
	i := bytes.IndexByte(r.data[r.off:], 0)
	if i < 0 {
		r.fail()
		return "", false
	}
	s := unsafe.String(unsafe.SliceData(r.data[r.off:]), i)
	r.off += i + 1
	return s, true
}

func cstrAt(sec []byte, off uint64) (string, error) {
	if off >= uint64(len(sec)) {
		return "", fmt.Errorf("string offset %#x beyond section of %d bytes", off, len(sec))
	}
	b := sec[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i]), nil
	}
	return "", fmt.Errorf("string at %#x not terminated", off)
}

// cstrView is cstrAt without the copy: the string is sec's bytes, valid for as long as sec is
// (see dieSecs.views).
func cstrView(sec []byte, off uint64) (string, error) {
	if off >= uint64(len(sec)) {
		return "", fmt.Errorf("string offset %#x beyond section of %d bytes", off, len(sec))
	}
	b := sec[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return unsafe.String(unsafe.SliceData(b), i), nil
	}
	return "", fmt.Errorf("string at %#x not terminated", off)
}

// DWARF 5 line table content types and the forms their values come in.
const (
	lnctPath     = 1
	lnctDirIndex = 2

	formBlock2  = 0x03
	formBlock4  = 0x04
	formData2   = 0x05
	formData4   = 0x06
	formData8   = 0x07
	formString  = 0x08
	formBlock   = 0x09
	formBlock1  = 0x0a
	formData1   = 0x0b
	formSdata   = 0x0d
	formStrp    = 0x0e
	formUdata   = 0x0f
	formStrx    = 0x1a
	formData16  = 0x1e
	formLineStr = 0x1f
	formStrx1   = 0x25
	formStrx2   = 0x26
	formStrx3   = 0x27
	formStrx4   = 0x28
)

type unitStrings struct {
	str, lineStr, strOffsets []byte
	strOffsetsBase           uint64
	dwarf64                  bool
}

// readForm reads one value of a DWARF 5 entry format. A string comes back in s; a number in n.
func readForm(r *secReader, form uint64, us *unitStrings) (s string, n uint64, isStr bool, err error) {
	offSize := 4
	if us.dwarf64 {
		offSize = 8
	}
	switch form {
	case formString:
		return r.cstr(), 0, true, nil
	case formLineStr, formStrp:
		off := r.uN(offSize)
		sec := us.lineStr
		if form == formStrp {
			sec = us.str
		}
		if r.err != nil {
			return "", 0, false, r.err
		}
		s, err := cstrAt(sec, off)
		return s, 0, true, err
	case formStrx, formStrx1, formStrx2, formStrx3, formStrx4:
		var idx uint64
		switch form {
		case formStrx:
			idx = r.uleb()
		case formStrx1:
			idx = r.uN(1)
		case formStrx2:
			idx = r.uN(2)
		case formStrx3:
			idx = r.uN(3)
		default:
			idx = r.uN(4)
		}
		if r.err != nil {
			return "", 0, false, r.err
		}
		if idx > uint64(len(us.strOffsets))/uint64(offSize) {
			return "", 0, false, fmt.Errorf("string index %d out of range", idx)
		}
		p := us.strOffsetsBase + idx*uint64(offSize)
		if p+uint64(offSize) > uint64(len(us.strOffsets)) || p < us.strOffsetsBase {
			return "", 0, false, fmt.Errorf("string index %d out of range", idx)
		}
		var off uint64
		if offSize == 8 {
			off = r.order.Uint64(us.strOffsets[p:])
		} else {
			off = uint64(r.order.Uint32(us.strOffsets[p:]))
		}
		s, err := cstrAt(us.str, off)
		return s, 0, true, err
	case formUdata:
		return "", r.uleb(), false, nil
	case formSdata:
		return "", uint64(r.sleb()), false, nil
	case formData1:
		return "", r.uN(1), false, nil
	case formData2:
		return "", r.uN(2), false, nil
	case formData4:
		return "", r.uN(4), false, nil
	case formData8:
		return "", r.uN(8), false, nil
	case formData16:
		r.skip(16)
		return "", 0, false, nil
	case formBlock:
		r.skip(r.uleb())
		return "", 0, false, nil
	case formBlock1:
		r.skip(r.uN(1))
		return "", 0, false, nil
	case formBlock2:
		r.skip(r.uN(2))
		return "", 0, false, nil
	case formBlock4:
		r.skip(r.uN(4))
		return "", 0, false, nil
	}
	return "", 0, false, fmt.Errorf("unsupported form %#x in line table header", form)
}

// parseLineFiles reads the header of the line program at off and composes every file name
// against compDir the way llvm's Prologue::getFileNameByIndex does for absolute paths.
func parseLineFiles(line []byte, off uint64, order binary.ByteOrder, compDir string, us *unitStrings) (*lineFiles, error) {
	if off >= uint64(len(line)) {
		return nil, fmt.Errorf("line table offset %#x beyond section of %d bytes", off, len(line))
	}
	r := &secReader{data: line, off: int(off), order: order}
	length := uint64(r.u32())
	dwarf64 := false
	if length == 0xffffffff {
		length = r.u64()
		dwarf64 = true
	}
	if r.err != nil || length > uint64(len(line)-r.off) {
		return nil, fmt.Errorf("line table at %#x: length %d exceeds section", off, length)
	}
	r.data = line[:r.off+int(length)]
	us2 := *us
	us2.dwarf64 = dwarf64
	version := int(r.u16())
	if version < 2 || version > 5 {
		return nil, fmt.Errorf("line table at %#x: unsupported version %d", off, version)
	}
	if version >= 5 {
		r.u8() // address size
		r.u8() // segment selector size
	}
	var headerLen uint64
	if dwarf64 {
		headerLen = r.u64()
	} else {
		headerLen = uint64(r.u32())
	}
	progStart := uint64(r.off) + headerLen
	lf := &lineFiles{version: version, maxOps: 1}
	lf.minInst = r.u8()
	if version >= 4 {
		lf.maxOps = r.u8()
	}
	lf.defaultIsStmt = r.u8() != 0
	lf.lineBase = int8(r.u8())
	lf.lineRange = r.u8()
	lf.opcodeBase = r.u8()
	if lf.opcodeBase > 0 {
		lf.stdLens = r.data[r.off:min(len(r.data), r.off+int(lf.opcodeBase)-1)]
		r.skip(uint64(lf.opcodeBase) - 1)
	}
	if r.err != nil {
		return nil, fmt.Errorf("line table at %#x: header: %w", off, r.err)
	}
	if progStart > uint64(len(r.data)) {
		return nil, fmt.Errorf("line table at %#x: header length %d exceeds the table", off, headerLen)
	}
	lf.prog = r.data[progStart:]
	lf.order = order
	lf.compDir = compDir
	if version < 5 {
		var dirs []string
		for {
			d := r.cstr()
			if r.err != nil {
				return nil, fmt.Errorf("line table at %#x: include directories: %w", off, r.err)
			}
			if d == "" {
				break
			}
			dirs = append(dirs, d)
		}
		lf.dirs = dirs
		lf.files = append(lf.files, "")
		lf.ok = append(lf.ok, false)
		for {
			name := r.cstr()
			if r.err != nil {
				return nil, fmt.Errorf("line table at %#x: file names: %w", off, r.err)
			}
			if name == "" {
				break
			}
			dirIdx := r.uleb()
			r.uleb() // modification time
			r.uleb() // length
			var dir string
			if dirIdx > 0 && dirIdx <= uint64(len(dirs)) {
				dir = dirs[dirIdx-1]
			}
			lf.files = append(lf.files, composePath(compDir, dir, name))
			lf.ok = append(lf.ok, true)
		}
		if r.err != nil {
			return nil, fmt.Errorf("line table at %#x: file names: %w", off, r.err)
		}
		return lf, nil
	}

	type format struct{ lnct, form uint64 }
	readFormats := func() []format {
		n := r.u8()
		fs := make([]format, 0, n)
		for i := 0; i < int(n) && r.err == nil; i++ {
			fs = append(fs, format{r.uleb(), r.uleb()})
		}
		return fs
	}
	readEntries := func(what string) ([]string, []uint64, error) {
		fs := readFormats()
		count := r.uleb()
		if r.err != nil {
			return nil, nil, fmt.Errorf("line table at %#x: %s: %w", off, what, r.err)
		}
		// Every entry takes at least one byte when it has any format at all.
		if len(fs) == 0 && count > 0 || count > uint64(len(r.data)-r.off) {
			return nil, nil, fmt.Errorf("line table at %#x: %s count %d exceeds header", off, what, count)
		}
		paths := make([]string, 0, count)
		dirIdx := make([]uint64, 0, count)
		for i := uint64(0); i < count; i++ {
			var p string
			var di uint64
			for _, f := range fs {
				s, n, _, err := readForm(r, f.form, &us2)
				if err != nil {
					return nil, nil, fmt.Errorf("line table at %#x: %s %d: %w", off, what, i, err)
				}
				switch f.lnct {
				case lnctPath:
					p = s
				case lnctDirIndex:
					di = n
				}
			}
			if r.err != nil {
				return nil, nil, fmt.Errorf("line table at %#x: %s: %w", off, what, r.err)
			}
			paths = append(paths, p)
			dirIdx = append(dirIdx, di)
		}
		return paths, dirIdx, nil
	}
	dirs, _, err := readEntries("directories")
	if err != nil {
		return nil, err
	}
	names, dirIdx, err := readEntries("file names")
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		var dir string
		if dirIdx[i] < uint64(len(dirs)) {
			dir = dirs[dirIdx[i]]
		}
		lf.files = append(lf.files, composePath(compDir, dir, name))
		lf.ok = append(lf.ok, true)
	}
	return lf, nil
}

func isAbs(p string) bool {
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\\`) {
		return true
	}
	return len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') &&
		(p[0] >= 'a' && p[0] <= 'z' || p[0] >= 'A' && p[0] <= 'Z')
}

// composePath is llvm's absolute-path composition: an absolute name stands alone; otherwise
// comp_dir (unless the include directory is absolute), the include directory and the name are
// appended with llvm::sys::path::append, which inserts one separator and never cleans "..".
func composePath(compDir, dir, name string) string {
	if isAbs(name) {
		return name
	}
	var p string
	if compDir != "" && !isAbs(dir) {
		p = llvmAppend(p, compDir)
	}
	p = llvmAppend(p, dir)
	return llvmAppend(p, name)
}

func llvmAppend(p, c string) string {
	if c == "" {
		return p
	}
	if p != "" && p[len(p)-1] == '/' {
		return p + strings.TrimLeft(c, "/")
	}
	if p == "" || c[0] == '/' {
		return p + c
	}
	return p + "/" + c
}

// lineRow is one row of the line-number matrix as the program produces it.
type lineRow struct {
	addr        uint64
	file        uint64
	line        int64
	column      uint64
	endSequence bool
}

// run executes the line program and calls emit for every row. It is bounded by the program's
// length: every opcode consumes at least one byte.
func (lf *lineFiles) run(emit func(lineRow)) error {
	r := &secReader{data: lf.prog, order: lf.order}
	maxOps := uint64(lf.maxOps)
	if maxOps == 0 {
		maxOps = 1
	}
	var (
		row     lineRow
		opIndex uint64
	)
	reset := func() {
		row = lineRow{file: 1, line: 1}
		opIndex = 0
	}
	advance := func(opAdv uint64) {
		if maxOps == 1 {
			row.addr += uint64(lf.minInst) * opAdv
			return
		}
		row.addr += uint64(lf.minInst) * ((opIndex + opAdv) / maxOps)
		opIndex = (opIndex + opAdv) % maxOps
	}
	reset()
	for r.off < len(r.data) {
		op := r.u8()
		switch {
		case op >= lf.opcodeBase:
			if lf.lineRange == 0 {
				return fmt.Errorf("line program: line_range 0")
			}
			adj := uint64(op - lf.opcodeBase)
			advance(adj / uint64(lf.lineRange))
			row.line += int64(lf.lineBase) + int64(adj%uint64(lf.lineRange))
			emit(row)
		case op == 0:
			n := r.uleb()
			if r.err != nil || n == 0 || n > uint64(len(r.data)-r.off) {
				return fmt.Errorf("line program: bad extended opcode length %d", n)
			}
			end := r.off + int(n)
			switch sub := r.u8(); sub {
			case 1: // DW_LNE_end_sequence
				row.endSequence = true
				emit(row)
				reset()
			case 2: // DW_LNE_set_address
				row.addr = r.uN(int(n - 1))
				opIndex = 0
			case 3: // DW_LNE_define_file
				name := r.cstr()
				dirIdx := r.uleb()
				var dir string
				if dirIdx > 0 && dirIdx <= uint64(len(lf.dirs)) {
					dir = lf.dirs[dirIdx-1]
				}
				lf.files = append(lf.files, composePath(lf.compDir, dir, name))
				lf.ok = append(lf.ok, true)
			}
			r.off = end
		case op == 1: // DW_LNS_copy
			emit(row)
		case op == 2: // DW_LNS_advance_pc
			advance(r.uleb())
		case op == 3: // DW_LNS_advance_line
			row.line += r.sleb()
		case op == 4: // DW_LNS_set_file
			row.file = r.uleb()
		case op == 5: // DW_LNS_set_column
			row.column = r.uleb()
		case op == 8: // DW_LNS_const_add_pc
			if lf.lineRange == 0 {
				return fmt.Errorf("line program: line_range 0")
			}
			advance(uint64(255-lf.opcodeBase) / uint64(lf.lineRange))
		case op == 9: // DW_LNS_fixed_advance_pc
			row.addr += uint64(r.u16())
			opIndex = 0
		case op == 6, op == 7, op == 10, op == 11: // is_stmt, basic_block, prologue, epilogue
		default: // DW_LNS_set_isa and opcodes this reader does not know: skip their operands
			if int(op) <= len(lf.stdLens) {
				for k := 0; k < int(lf.stdLens[op-1]); k++ {
					r.uleb()
				}
			}
		}
		if r.err != nil {
			return fmt.Errorf("line program: %w", r.err)
		}
	}
	return nil
}
