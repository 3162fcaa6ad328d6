package gopclntab

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// The toolchain here writes only the 1.20 format. The older layouts are checked on tables
// written by synthTable after the runtime and linker sources of each release: two functions,
// the first with one inlined call, in an ELF image with the sections Load reads.

const (
	synthText    = 0x401000
	synthPclntab = 0x4a0000
	synthRodata  = 0x500000 // moduledata.gofunc for 1.18+
	synthData    = 0x600000
	synthInfo    = 0x700000
	synthTreeOff = 0x10 // the inline tree's offset in .rodata
)

type synthOpts struct {
	ver           format
	goVersion     string // written to .go.buildinfo; "" for none
	noModuledata  bool
	headerNoStart bool // 1.18+: textStart left 0, as Go 1.26 does
}

func le32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func le64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

func synthTable(o synthOpts) *elf.File {
	ver := o.ver
	// Strings: function names, then file names.
	var names []byte
	nameOff := map[string]uint32{}
	addName := func(s string) {
		nameOff[s] = uint32(len(names))
		names = append(append(names, s...), 0)
	}
	var files []byte
	fileOff := map[string]uint32{}
	addFile := func(s string) {
		fileOff[s] = uint32(len(files))
		files = append(append(files, s...), 0)
	}
	// File numbers the pcfile tables use: cutab indexes from 1.16, filetab indexes before.
	fa, fb := int32(0), int32(1)
	if ver == ver12 {
		fa, fb = 1, 2
	}

	// pc-value tables, behind a leading zero byte so that offset 0 means "none".
	pctab := []byte{0}
	addTab := func(t []byte) uint32 {
		off := uint32(len(pctab))
		pctab = append(pctab, t...)
		return off
	}
	f0file := addTab(pcvalue(1, [2]int32{fa, 0x10}, [2]int32{fb, 0x10}, [2]int32{fa, 0x20}))
	f0line := addTab(pcvalue(1, [2]int32{10, 0x10}, [2]int32{21, 0x10}, [2]int32{12, 0x20}))
	f0inl := addTab(pcvalue(1, [2]int32{-1, 0x10}, [2]int32{0, 0x10}, [2]int32{-1, 0x20}))
	f1file := addTab(pcvalue(1, [2]int32{fa, 0x20}))
	f1line := addTab(pcvalue(1, [2]int32{30, 0x20}))

	// The pclntab of 1.2 is one region: names, files and tables live at offsets from its
	// start, after the header and functab. Later formats have separate regions.
	const nfunc = 2
	ptr := 8
	inlFuncdata := uint32(3)
	if ver == ver12 {
		inlFuncdata = 4
	}

	// Inline tree entry 0: main.inl called from pc 0x08 of main.outer.
	var tree []byte
	treeName := func(off uint32) {
		if ver == ver120 {
			tree = append(tree, 0, 0, 0, 0)
			tree = le32(tree, off)
			tree = le32(tree, 0x08)
			tree = le32(tree, 19)
			return
		}
		tree = append(tree, 0xff, 0xff, 0, 0) // parent -1, funcID, pad
		tree = le32(tree, uint32(fa))
		tree = le32(tree, 10)
		tree = le32(tree, off)
		tree = le32(tree, 0x08)
	}

	// _func records, relative to the start of the function data region at base.
	type fn struct {
		entry                  uint64
		name                   string
		pcfile, pcln, pcdataIn uint32
		startLine              int32
	}
	fns := []fn{
		{synthText, "main.outer", f0file, f0line, f0inl, 9},
		{synthText + 0x40, "main.other", f1file, f1line, 0, 29},
	}
	end := uint64(synthText + 0x60)
	funcRecords := func(base uint64, recStart int, nameBias uint32) (recs []byte, offs []uint32) {
		recs = make([]byte, recStart)
		for _, f := range fns {
			for len(recs)%ptr != 0 {
				recs = append(recs, 0)
			}
			offs = append(offs, uint32(len(recs)))
			if ver >= ver118 {
				recs = le32(recs, uint32(f.entry-synthText))
			} else {
				recs = le64(recs, f.entry)
			}
			recs = le32(recs, nameOff[f.name]+nameBias)
			recs = le32(recs, 0) // args
			recs = le32(recs, 0) // deferreturn
			recs = le32(recs, 0) // pcsp
			recs = le32(recs, f.pcfile)
			recs = le32(recs, f.pcln)
			npcdata, nfuncdata := uint32(0), uint32(0)
			if f.pcdataIn != 0 {
				npcdata, nfuncdata = 3, inlFuncdata+1
			}
			recs = le32(recs, npcdata)
			if ver >= ver116 {
				recs = le32(recs, 0) // cuOffset
			}
			if ver == ver120 {
				recs = le32(recs, uint32(f.startLine))
			}
			recs = append(recs, 0, 0, 0, byte(nfuncdata))
			for i := uint32(0); i < npcdata; i++ {
				v := uint32(0)
				if i == 2 {
					v = f.pcdataIn
				}
				recs = le32(recs, v)
			}
			for i := uint32(0); i < nfuncdata; i++ {
				if ver >= ver118 {
					v := ^uint32(0)
					if i == inlFuncdata {
						v = synthTreeOff
					}
					recs = le32(recs, v)
					continue
				}
				for (base+uint64(len(recs)))%uint64(ptr) != 0 {
					recs = append(recs, 0)
				}
				v := uint64(0)
				if i == inlFuncdata {
					v = synthRodata + synthTreeOff
				}
				recs = le64(recs, v)
			}
		}
		return recs, offs
	}

	var tab []byte
	var funcnametabAddr uint64
	if ver == ver12 {
		// Header, functab, filetab offset, then names, files, filetab, tables, records.
		hdr := 8 + ptr
		functabSize := (2*nfunc + 1) * ptr
		namesAt := uint32(hdr + functabSize + 4)
		addName("main.outer")
		addName("main.other")
		addName("main.inl")
		addFile("a.go")
		addFile("b.go")
		filesAt := namesAt + uint32(len(names))
		filetabAt := filesAt + uint32(len(files))
		filetab := le32(nil, 3)
		filetab = le32(filetab, filesAt+fileOff["a.go"])
		filetab = le32(filetab, filesAt+fileOff["b.go"])
		pctabAt := filetabAt + uint32(len(filetab))
		recsAt := pctabAt + uint32(len(pctab))
		for i := range fns {
			fns[i].pcfile += pctabAt
			fns[i].pcln += pctabAt
			if fns[i].pcdataIn != 0 {
				fns[i].pcdataIn += pctabAt
			}
		}
		treeName(namesAt + nameOff["main.inl"])
		recs, offs := funcRecords(synthPclntab, int(recsAt), namesAt)
		tab = []byte{0xfb, 0xff, 0xff, 0xff, 0, 0, 1, byte(ptr)}
		tab = le64(tab, nfunc)
		for i, f := range fns {
			tab = le64(tab, f.entry)
			tab = le64(tab, uint64(offs[i]))
		}
		tab = le64(tab, end)
		tab = le32(tab, filetabAt)
		tab = append(append(append(append(tab, names...), files...), filetab...), pctab...)
		tab = append(tab, recs[len(tab):]...)
		funcnametabAddr = synthPclntab
	} else {
		addName("main.outer")
		addName("main.other")
		addName("main.inl")
		addFile("a.go")
		addFile("b.go")
		cutab := le32(le32(nil, fileOff["a.go"]), fileOff["b.go"])
		treeName(nameOff["main.inl"])
		words := 7
		if ver >= ver118 {
			words = 8
		}
		hdrSize := 8 + words*ptr
		namesAt := uint64(hdrSize)
		cuAt := namesAt + uint64(len(names))
		filesAt := cuAt + uint64(len(cutab))
		pctabAt := filesAt + uint64(len(files))
		funcAt := pctabAt + uint64(len(pctab))
		for funcAt%uint64(ptr) != 0 {
			funcAt++
		}
		field := ptr
		if ver >= ver118 {
			field = 4
		}
		functabSize := (2*nfunc + 1) * field
		recs, offs := funcRecords(synthPclntab+funcAt, functabSize, 0)
		ft := recs[:0:0]
		for i, f := range fns {
			if ver >= ver118 {
				ft = le32(le32(ft, uint32(f.entry-synthText)), offs[i])
			} else {
				ft = le64(le64(ft, f.entry), uint64(offs[i]))
			}
		}
		if ver >= ver118 {
			ft = le32(ft, uint32(end-synthText))
		} else {
			ft = le64(ft, end)
		}
		copy(recs, ft)
		magic := map[format]uint32{ver116: magic116, ver118: magic118, ver120: magic120}[ver]
		tab = le32(nil, magic)
		tab = append(tab, 0, 0, 1, byte(ptr))
		tab = le64(tab, nfunc)
		tab = le64(tab, 2)
		if ver >= ver118 {
			start := uint64(synthText)
			if o.headerNoStart {
				start = 0
			}
			tab = le64(tab, start)
		}
		for _, v := range []uint64{namesAt, cuAt, filesAt, pctabAt, funcAt} {
			tab = le64(tab, v)
		}
		tab = append(append(append(append(tab, names...), cutab...), files...), pctab...)
		for uint64(len(tab)) < funcAt {
			tab = append(tab, 0)
		}
		tab = append(tab, recs...)
		funcnametabAddr = synthPclntab + namesAt
	}

	rodata := make([]byte, synthTreeOff)
	rodata = append(rodata, tree...)

	// runtime.firstmoduledata: pcHeader, funcnametab, ..., text at word 22, gofunc at 38 or 40.
	md := make([]byte, 48*8)
	if !o.noModuledata && ver >= ver118 {
		binary.LittleEndian.PutUint64(md[0:], synthPclntab)
		binary.LittleEndian.PutUint64(md[8:], funcnametabAddr)
		binary.LittleEndian.PutUint64(md[mdText*8:], synthText)
		g := mdGofunc118
		if ver == ver120 {
			g = mdGofunc120
		}
		binary.LittleEndian.PutUint64(md[g*8:], synthRodata)
	}
	noptr := append(make([]byte, 24), md...) // not at the section start, on purpose

	var info []byte
	if o.goVersion != "" {
		// The pre-1.18 form: a pointer to a Go string header.
		info = []byte("\xff Go buildinf:")
		info = append(info, 8, 0)
		info = le64(info, synthInfo+32)
		info = le64(info, 0)
		info = le64(info, synthInfo+48)
		info = le64(info, uint64(len(o.goVersion)))
		info = append(info, o.goVersion...)
	}

	sect := func(name string, addr uint64, data []byte) *elf.Section {
		return &elf.Section{
			SectionHeader: elf.SectionHeader{Name: name, Type: elf.SHT_PROGBITS, Flags: elf.SHF_ALLOC,
				Addr: addr, Size: uint64(len(data)), FileSize: uint64(len(data))},
			ReaderAt: bytes.NewReader(data),
		}
	}
	f := &elf.File{FileHeader: elf.FileHeader{Class: elf.ELFCLASS64, Data: elf.ELFDATA2LSB,
		Machine: elf.EM_X86_64, ByteOrder: binary.LittleEndian}}
	f.Sections = []*elf.Section{
		sect(".text", synthText, make([]byte, 0x60)),
		sect(".gopclntab", synthPclntab, tab),
		sect(".rodata", synthRodata, rodata),
		sect(".noptrdata", synthData, noptr),
	}
	if info != nil {
		f.Sections = append(f.Sections, sect(".go.buildinfo", synthInfo, info))
	}
	return f
}

func TestSyntheticFormats(t *testing.T) {
	type want struct {
		pc     uint64
		frames []index.Frame
	}
	// Start lines exist from 1.20 on: main.outer 9, main.inl 19, main.other 29.
	withInlines := func(hasStart bool) []want {
		var outer, inl, other uint32
		if hasStart {
			outer, inl, other = 9, 19, 29
		}
		outerFrame := func(file string, line uint32) index.Frame {
			return index.Frame{Function: "main.outer", File: file, Line: line, StartLine: outer, StartFile: "a.go", StartAddress: synthText}
		}
		return []want{
			{synthText + 0x04, []index.Frame{outerFrame("a.go", 10)}},
			{synthText + 0x14, []index.Frame{
				{Function: "main.inl", File: "b.go", Line: 21, StartLine: inl, StartFile: "b.go", StartAddress: synthText + 0x10},
				outerFrame("a.go", 10),
			}},
			{synthText + 0x30, []index.Frame{outerFrame("a.go", 12)}},
			{synthText + 0x50, []index.Frame{{Function: "main.other", File: "a.go", Line: 30, StartLine: other, StartFile: "a.go", StartAddress: synthText + 0x40}}},
			{synthText + 0x60, nil},
		}
	}
	noInlines := func() []want {
		return []want{
			{synthText + 0x14, []index.Frame{{Function: "main.outer", File: "b.go", Line: 21, StartFile: "a.go", StartAddress: synthText}}},
			{synthText + 0x50, []index.Frame{{Function: "main.other", File: "a.go", Line: 30, StartFile: "a.go", StartAddress: synthText + 0x40}}},
		}
	}
	tests := []struct {
		name     string
		opts     synthOpts
		version  string
		fidelity index.Fidelity
		inlined  int
		want     []want
	}{
		{"1.20", synthOpts{ver: ver120}, "1.20", index.FidelityFullInlines, 1, withInlines(true)},
		{"1.20 without textStart", synthOpts{ver: ver120, headerNoStart: true}, "1.20", index.FidelityFullInlines, 1, withInlines(true)},
		{"1.18", synthOpts{ver: ver118}, "1.18", index.FidelityFullInlines, 1, withInlines(false)},
		{"1.18 without moduledata", synthOpts{ver: ver118, noModuledata: true}, "1.18", index.FidelityLines, 0, noInlines()},
		{"1.16", synthOpts{ver: ver116}, "1.16", index.FidelityFullInlines, 1, withInlines(false)},
		{"1.2 written by go1.15", synthOpts{ver: ver12, goVersion: "go1.15.5"}, "1.2", index.FidelityFullInlines, 1, withInlines(false)},
		{"1.2 written by go1.12", synthOpts{ver: ver12, goVersion: "go1.12"}, "1.2", index.FidelityLines, 0, noInlines()},
		{"1.2 without build info", synthOpts{ver: ver12}, "1.2", index.FidelityLines, 0, noInlines()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := index.NewBuilder()
			st, err := Load(synthTable(tc.opts), b)
			if err != nil {
				t.Fatal(err)
			}
			if st.Version != tc.version || st.Functions != 2 || st.InlinedCalls != tc.inlined {
				t.Errorf("stats %+v", st)
			}
			ix, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			if ix.Fidelity() != tc.fidelity {
				t.Errorf("fidelity %v, want %v", ix.Fidelity(), tc.fidelity)
			}
			for _, w := range tc.want {
				if got := ix.Lookup(w.pc); !reflect.DeepEqual(got, w.frames) {
					t.Errorf("Lookup(%#x) = %+v, want %+v", w.pc, got, w.frames)
				}
			}
		})
	}
}
