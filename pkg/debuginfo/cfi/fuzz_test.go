package cfi

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseSection parses arbitrary bytes as .eh_frame or .debug_frame, for x86-64 or
// AArch64. It may fail, but must not panic or hang, must keep memory in proportion to the
// input, and what it returns must keep the Table's promises. The seeds
// (testdata/fuzz/FuzzParseSection) are real sections of gcc's output for both machines and
// hand-assembled ones that use every instruction; the script testdata/make-fuzz-seeds.sh
// regenerates them.
func FuzzParseSection(f *testing.F) {
	for _, s := range handSeeds() {
		f.Add(s.data, s.addr, s.kind == DebugFrame, s.arch == elf.EM_AARCH64)
	}
	f.Fuzz(func(t *testing.T, data []byte, addr uint64, debugFrame, aarch64 bool) {
		kind := EHFrame
		if debugFrame {
			kind = DebugFrame
		}
		arch := elf.EM_X86_64
		if aarch64 {
			arch = elf.EM_AARCH64
		}
		tb, err := ParseSectionWith(data, addr, kind, Options{Arch: arch})
		if err != nil {
			if tb != nil {
				t.Fatalf("a table with error %v", err)
			}
			return
		}
		if tb.Arch != arch {
			t.Fatalf("table for %v, parsed for %v", tb.Arch, arch)
		}
		checkInvariants(t, tb)
		// Every row but an FDE's first and its closing row takes at least one byte of
		// instruction, and an FDE takes at least ten bytes.
		if len(tb.Rows) > len(data)+2 {
			t.Fatalf("%d rows from %d bytes", len(tb.Rows), len(data))
		}
		if tb.Skipped > 0 && tb.SkipReason == nil {
			t.Fatal("skipped FDEs without a reason")
		}
		for _, r := range tb.Rows {
			if got, ok := tb.Lookup(r.PC); !ok || got != r {
				t.Fatalf("Lookup(%#x) = %v, %v; want %v", r.PC, got, ok, r)
			}
		}
	})
}

// FuzzProgram runs arbitrary call frame instructions inside a well-formed CIE and FDE, so
// that the fuzzer spends its time in the interpreter rather than in the framing, with
// x86-64's or AArch64's CIE and rules. The FDE is followed by a second one that must keep
// its rows whatever the first does.
func FuzzProgram(f *testing.F) {
	f.Add([]byte(nil), cat(advance(1), defCFAOffset(16), offset(regRBP, 2), advance(3), defCFARegister(regRBP)), uint8(1), false)
	f.Add(cat(defCFA(regRSP, 8), offset(16, 1)), cat(cat(cfaRememberState), advance(2), defCFAExpr(pltExpr(11)), cat(cfaRestoreState)), uint8(4), false)
	f.Add([]byte(nil), cat(cat(cfaSetLoc, u32(8)), cat(cfaExpression, uleb(16), uleb(1), 0x30), undefined(16)), uint8(1), false)
	f.Add([]byte(nil), cat(advance(1), negateRAState, advance(1), defCFAOffset(32), offset(regX29, 4), offset(regX30, 3),
		advance(1), defCFARegister(regX29), advance(4), cat(cfaRememberState), defCFA(regSP, 0), restore(regX30), restore(regX29),
		negateRAState, advance(1), cat(cfaRestoreState)), uint8(4), true)
	f.Add(negateRAState, cat(advance(1), cat(cfaSameValue, uleb(regX30)), advance(1), undefined(regX30)), uint8(4), true)
	f.Fuzz(func(t *testing.T, cieInsns, fdeInsns []byte, codeAlign uint8, aarch64 bool) {
		s := &section{kind: EHFrame, addr: 0x2000}
		newCIE, arch, second := stdCIE, elf.EM_X86_64, rsp(0x1101, 16)
		if aarch64 {
			// The second FDE's CIE has AArch64's code alignment of 4.
			newCIE, arch, second = a64CIE, elf.EM_AARCH64, sp(0x1104, 16)
		}
		c := newCIE()
		c.insns = append(c.insns, cieInsns...)
		c.codeAlign = uint64(codeAlign)
		ci := s.cie(c)
		s.fde(fdeSpec{cie: ci, start: 0x1000, length: 0x100, hasAug: true, insns: fdeInsns})
		s.fde(fdeSpec{cie: s.cie(newCIE()), start: 0x1100, length: 0x10, hasAug: true, insns: cat(advance(1), defCFAOffset(16))})
		tb, err := ParseSectionWith(s.b, s.addr, EHFrame, Options{Arch: arch})
		if err != nil {
			t.Fatalf("well-formed framing failed: %v", err)
		}
		checkInvariants(t, tb)
		if got, _ := tb.Lookup(second.PC); got != second {
			t.Fatalf("the second FDE's row: %v, want %v", got, second)
		}
		if tb.FDEs+tb.Skipped != 2 {
			t.Fatalf("%d FDEs kept and %d skipped of 2", tb.FDEs, tb.Skipped)
		}
		for _, r := range tb.Rows {
			if r.PC < 0x1000 || r.PC > 0x1110 {
				t.Fatalf("row %v outside the FDEs", r)
			}
		}
	})
}

type seed struct {
	name string
	data []byte
	addr uint64
	kind SectionKind
	arch elf.Machine // x86-64 when zero
}

// handSeeds are small sections that together use every instruction, every pointer
// encoding the parser reads and both section formats.
func handSeeds() []seed {
	eh := &section{kind: EHFrame, addr: 0x2000}
	c := eh.cie(stdCIE())
	eh.fde(fdeSpec{cie: c, start: 0x1000, length: 0x40, hasAug: true, insns: cat(
		advance(1), defCFAOffset(16), offset(regRBP, 2),
		advance(3), defCFARegister(regRBP),
		advance(0x40), cat(cfaRememberState), defCFA(regRSP, 8), restore(regRBP),
		advance(0x100), cat(cfaRestoreState),
		advance(0x10000), cat(cfaDefCFASF, uleb(regRSP), sleb(-2)), cat(cfaDefCFAOffsetSF, sleb(-3)),
		cat(cfaOffsetExtended, uleb(regRBP), uleb(3)), cat(cfaOffsetExtendedSF, uleb(16), sleb(1)),
		cat(cfaGNUNegativeOffsetExtended, uleb(3), uleb(1)), cat(cfaRestoreExtended, uleb(16)),
		undefined(15), cat(cfaSameValue, uleb(regRBP)), cat(cfaRegister, uleb(12), uleb(13)),
		cat(cfaExpression, uleb(regRBP), uleb(2), 0x76, 0x00), cat(cfaValOffset, uleb(3), uleb(1)),
		cat(cfaValOffsetSF, uleb(3), sleb(-1)), cat(cfaValExpression, uleb(3), uleb(1), 0x30),
		cat(cfaGNUArgsSize, uleb(16)), cat(cfaNop),
		advance(1), defCFAExpr(pltExpr(11)), advance(1), defCFAExpr(pltExpr(10)),
		advance(1), defCFAExpr([]byte{0x77, 0xa0, 0x01, 0x06}), advance(1), undefined(16))})
	sig := stdCIE()
	sig.aug, sig.augData = "zPLRS", cat(0x9b, u32(0x1234), 0x1b, 0x1b)
	c = eh.cie(sig)
	eh.fde(fdeSpec{cie: c, start: 0x1100, length: 0x10, hasAug: true, augData: u32(0), insns: cat(advance(1), cat(cfaSetLoc, u32(4)))})
	for _, enc := range []byte{0x01, 0x02, 0x03, 0x04, 0x09, 0x0a, 0x0b, 0x0c, 0x1c, 0x2b, 0x3b, 0x50} {
		ci := stdCIE()
		ci.augData = []byte{enc}
		c = eh.cie(ci)
		eh.fde(fdeSpec{cie: c, enc: enc, start: 0x1200 + uint64(enc)*0x10, length: 0x10, hasAug: true, insns: defCFAOffset(16)})
	}
	eh.zero()

	dbg := &section{kind: DebugFrame}
	dc := cieSpec{version: 4, addrSize: 8, codeAlign: 1, dataAlign: -8, ra: 16, insns: cat(defCFA(regRSP, 8), offset(16, 1))}
	c = dbg.cie(dc)
	dbg.fde(fdeSpec{cie: c, start: 0x1000, length: 0x20, insns: cat(advance(1), defCFAOffset(16), cat(cfaSetLoc, u64(0x1010)), defCFAOffset(8))})
	dc.is64, dc.version = true, 3
	c = dbg.cie(dc)
	dbg.fde(fdeSpec{is64: true, cie: c, start: 0x1020, length: 0x20, insns: cat(advance(2), defCFAOffset(16))})

	// AArch64: frame records, pac-ret through remember/restore_state, the B and G
	// augmentations, a signal frame, the outermost frame, a CFA in x0.
	a64 := &section{kind: EHFrame, addr: 0x3000}
	c = a64.cie(a64CIE())
	a64.fde(fdeSpec{cie: c, start: 0x1000, length: 0x80, hasAug: true, insns: cat(
		advance(1), negateRAState, advance(1), defCFAOffset(32), offset(regX29, 4), offset(regX30, 3),
		advance(1), defCFARegister(regX29), advance(4), cat(cfaRememberState), defCFA(regSP, 32),
		advance(1), restore(regX30), restore(regX29), defCFAOffset(0), advance(1), negateRAState,
		advance(1), cat(cfaRestoreState), advance(2), defCFA(0, 0), advance(1), cat(cfaSameValue, uleb(regX30)),
		advance(1), cat(cfaRegister, uleb(regX30), uleb(9)), advance(1), undefined(regX30))})
	bkey := a64CIE()
	bkey.aug, bkey.augData = "zPLRBG", cat(0x9b, u32(0x1234), 0x1b, 0x1b)
	bkey.insns = cat(bkey.insns, negateRAState)
	c = a64.cie(bkey)
	a64.fde(fdeSpec{cie: c, start: 0x1080, length: 0x20, hasAug: true, augData: u32(0), insns: cat(advance(1), negateRAState, defCFAOffset(16))})
	asig := a64CIE()
	asig.aug = "zRS"
	asig.insns = cat(defCFA(regX29, 0), offset(regX29, 0), cat(cfaOffsetExtendedSF, uleb(regX30), sleb(-1)))
	c = a64.cie(asig)
	a64.fde(fdeSpec{cie: c, start: 0x10a0, length: 0xc, hasAug: true})
	a64.zero()

	return []seed{
		{"hand-eh_frame", eh.b, eh.addr, EHFrame, 0},
		{"hand-debug_frame", dbg.b, 0, DebugFrame, 0},
		{"hand-aarch64-eh_frame", a64.b, a64.addr, EHFrame, elf.EM_AARCH64},
	}
}

// TestWriteFuzzSeeds writes the seed corpus when PROFSYM_CFI_FUZZ_SEEDS names a directory
// (testdata/make-fuzz-seeds.sh sets it): the hand-assembled seeds and the frame sections
// of the differential test's gcc builds, native and cross-compiled for AArch64.
func TestWriteFuzzSeeds(t *testing.T) {
	out := os.Getenv("PROFSYM_CFI_FUZZ_SEEDS")
	if out == "" {
		t.Skip("PROFSYM_CFI_FUZZ_SEEDS not set")
	}
	seeds := handSeeds()
	dir := t.TempDir()
	for _, b := range []struct {
		name, cc string
		flags    []string
	}{
		{"gcc-O2-fp", "gcc", []string{"-O2", "-fno-omit-frame-pointer"}},
		{"gcc-O0", "gcc", []string{"-O0"}},
		{"gcc-O2-debug_frame", "gcc", []string{"-O2", "-g", "-fno-asynchronous-unwind-tables"}},
		{"aarch64-gcc-O2-pac", "aarch64-linux-gnu-gcc", []string{"-O2", "-mbranch-protection=standard"}},
		{"aarch64-gcc-O2-bkey", "aarch64-linux-gnu-gcc", []string{"-O2", "-fomit-frame-pointer", "-mbranch-protection=pac-ret+leaf+b-key"}},
		{"aarch64-gcc-O2-debug_frame", "aarch64-linux-gnu-gcc", []string{"-O2", "-g", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables"}},
	} {
		needTools(t, b.cc)
		lib, exe := ccBuild(t, b.cc, dir, b.name, b.flags...)
		for _, p := range []string{lib, exe} {
			ef, err := elf.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{".eh_frame", ".debug_frame"} {
				s := ef.Section(name)
				if s == nil || s.Size == 0 {
					continue
				}
				data, err := s.Data()
				if err != nil {
					t.Fatal(err)
				}
				kind := EHFrame
				if name == ".debug_frame" {
					kind = DebugFrame
				}
				base := filepath.Base(p)
				if base != b.name {
					base = b.name + "-lib"
				}
				seeds = append(seeds, seed{base + name, data, s.Addr, kind, ef.Machine})
			}
			ef.Close()
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range seeds {
		if len(s.data) > 32<<10 {
			t.Fatalf("seed %s: %d bytes, more than the 32 KiB a seed may have", s.name, len(s.data))
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nuint64(%d)\nbool(%v)\nbool(%v)\n", s.data, s.addr, s.kind == DebugFrame, s.arch == elf.EM_AARCH64)
		if err := os.WriteFile(filepath.Join(out, s.name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d seeds in %s", len(seeds), out)
}

// TestHandSeeds keeps the hand-assembled seeds meaningful: a seed that fails or skips
// would leave the fuzzer fewer paths to start from.
func TestHandSeeds(t *testing.T) {
	for _, s := range handSeeds() {
		tb, err := ParseSectionWith(s.data, s.addr, s.kind, Options{Arch: s.arch})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if tb.Skipped != 0 || len(tb.Rows) < 4 {
			t.Errorf("%s: %d rows, %d skipped (%v)", s.name, len(tb.Rows), tb.Skipped, tb.SkipReason)
		}
		t.Logf("%s: %d FDEs, %d rows", s.name, tb.FDEs, len(tb.Rows))
		if s.arch == elf.EM_AARCH64 {
			var signed, signal, end bool
			for _, r := range tb.Rows {
				signed = signed || r.RASigned
				signal = signal || r.CFA == CFASignalFrame
				end = end || r.CFA == CFAEndOfStack
			}
			if !signed || !signal || !end {
				t.Errorf("%s: rows with a signed return address %v, a signal frame %v, the outermost frame %v; want all", s.name, signed, signal, end)
			}
		}
	}
}
