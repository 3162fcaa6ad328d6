package debuginfo_test

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/elfx/elfxtest"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/debuginfo/internal/llvmcompare"
)

// codeSection is an executable section of a laid-out relocatable object.
type codeSection struct {
	name       string
	addr, size uint64
}

// layoutOf opens obj and returns its SHF_ALLOC sections with the addresses elfx gave them.
func layoutOf(t *testing.T, obj string) (alloc []codeSection, code []codeSection) {
	t.Helper()
	f, closer, err := elfx.OpenPath(obj, elfx.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if !f.LaidOut() {
		t.Fatalf("%s: not laid out", obj)
	}
	for _, s := range f.ELF().Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Size == 0 {
			continue
		}
		c := codeSection{s.Name, s.Addr, s.Size}
		alloc = append(alloc, c)
		if s.Flags&elf.SHF_EXECINSTR != 0 {
			code = append(code, c)
		}
	}
	return alloc, code
}

// linkAt links obj with a linker script that puts each of its SHF_ALLOC sections at base plus
// the address the module layout gave it, so that llvm-symbolizer, reading the linked file at
// base+a, answers what the object should answer at a.
func linkAt(t *testing.T, tc elfxtest.Toolchain, obj string, alloc []codeSection, base uint64) string {
	t.Helper()
	var script strings.Builder
	script.WriteString("SECTIONS {\n")
	for _, s := range alloc {
		fmt.Fprintf(&script, "  %s %#x : { *(%s) }\n", s.name, base+s.addr, s.name)
	}
	script.WriteString("}\n")
	dir := filepath.Dir(obj)
	lds := filepath.Join(dir, "layout.ld")
	if err := os.WriteFile(lds, []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "linked")
	tc.Run(t, "ld", "-T", lds, "-e", "hot", "-o", out, obj)
	return out
}

// TestKernelModuleObject symbolizes a relocatable object shaped like a kernel module
// (elfxtest.KernelModule, gcc -c -g -O2) at the addresses of the module layout: .text from
// 0, then .text.unlikely and .exit.text, with .init.text after them. Every address of every
// code section answers as llvm-symbolizer answers on the object linked (ld and a linker
// script) with its sections at the layout's addresses plus a base; and every address of the
// object built with all its code in .text answers as llvm-symbolizer answers the same offset
// of that object (it reads an object's sections as if all started at 0, so on the first
// object it mixes up .text with the other code sections).
func TestKernelModuleObject(t *testing.T) {
	elfxtest.Need(t, "llvm-symbolizer")
	for _, tc := range elfxtest.Toolchains(t) {
		t.Run(tc.Arch, func(t *testing.T) {
			elfxtest.Need(t, tc.Tool("ld"))
			dir := t.TempDir()
			obj := tc.CC(t, dir, "mod.o", elfxtest.KernelModule, "-c", "-g", "-O2")
			ix, info, err := debuginfo.OpenIndex(obj, debuginfo.Options{NoSearch: true})
			if err != nil {
				t.Fatal(err)
			}
			if info.DWARFError != "" || len(info.Warnings) > 0 || ix.Fidelity() != index.FidelityFullInlines {
				t.Fatalf("DWARF error %q, warnings %q, fidelity %v", info.DWARFError, info.Warnings, ix.Fidelity())
			}
			alloc, code := layoutOf(t, obj)
			byName := map[string]codeSection{}
			for _, c := range code {
				byName[c.name] = c
			}
			for _, n := range []string{".text", ".text.unlikely", ".exit.text", ".init.text"} {
				if _, ok := byName[n]; !ok {
					t.Fatalf("no code section %s (%v)", n, code)
				}
			}

			// .text offsets are addresses of both, where .text is the only code.
			textOnly := tc.CC(t, dir, "text.o", elfxtest.KernelModule, "-c", "-g", "-O2", "-DTEXT_ONLY", "-fno-reorder-blocks-and-partition")
			tix, _, err := debuginfo.OpenIndex(textOnly, debuginfo.Options{NoSearch: true})
			if err != nil {
				t.Fatal(err)
			}
			_, textCode := layoutOf(t, textOnly)
			if len(textCode) != 1 || textCode[0].name != ".text" {
				t.Fatalf("-DTEXT_ONLY: code sections %v", textCode)
			}
			var addrs []uint64
			for a := uint64(0); a < textCode[0].size; a++ {
				addrs = append(addrs, a)
			}
			ours, inlined := lookupAll(tix, addrs)
			ref, err := llvmcompare.Tool{}.Symbolize(t.Context(), textOnly, addrs)
			if err != nil {
				t.Fatal(err)
			}
			compareAll(t, "the object's .text", addrs, ours, ref)
			if inlined == 0 {
				t.Error(".text: no inlined frames")
			}

			// Every code section, against the linked object.
			const base = 0x1000000
			linked := linkAt(t, tc, obj, alloc, base)
			addrs = addrs[:0]
			var shifted []uint64
			for _, c := range code {
				for a := c.addr; a < c.addr+c.size; a++ {
					addrs = append(addrs, a)
					shifted = append(shifted, base+a)
				}
			}
			ours, _ = lookupAll(ix, addrs)
			ref, err = llvmcompare.Tool{}.Symbolize(t.Context(), linked, shifted)
			if err != nil {
				t.Fatal(err)
			}
			compareAll(t, "the linked object", addrs, ours, ref)

			// The functions of the sections after .text, by name.
			for _, want := range []struct{ section, function string }{
				{".text.unlikely", "slow_path"}, {".exit.text", "module_stop"}, {".init.text", "module_start"},
			} {
				s := byName[want.section]
				fr := ix.Lookup(s.addr + s.size/2)
				if len(fr) == 0 || fr[len(fr)-1].Function != want.function || fr[0].Line == 0 {
					t.Errorf("%s at %#x: %v, want %s with a line", want.section, s.addr+s.size/2, fr, want.function)
				}
			}
		})
	}
}

func compareAll(t *testing.T, what string, addrs []uint64, ours, ref [][]llvmcompare.Frame) {
	t.Helper()
	rep, err := llvmcompare.Compare(addrs, ours, ref, llvmcompare.ModeFull, llvmcompare.Known...)
	if err != nil {
		t.Fatal(err)
	}
	if u := rep.Unexplained(); len(u) > 0 {
		for _, d := range u[:min(len(u), 5)] {
			t.Errorf("%s: %#x: %s: ours %s, llvm-symbolizer %s", what, d.Addr, d.Kind, llvmcompare.Chain(d.Ours), llvmcompare.Chain(d.Ref))
		}
		t.Fatalf("%s: %d of %d addresses differ", what, len(u), len(addrs))
	}
	t.Logf("%s: %d addresses agree with llvm-symbolizer (%d known differences)", what, len(addrs), rep.ChainKnown+rep.LineKnown)
}

// TestKernelAddressExecutable links a freestanding program at the kernel's text address
// (0xffffffff81000000, as vmlinux is) and holds every address of its functions to
// llvm-symbolizer's answers.
func TestKernelAddressExecutable(t *testing.T) {
	elfxtest.Need(t, "gcc", "llvm-symbolizer")
	dir := t.TempDir()
	src := elfxtest.KernelModule + "\nvoid _start(void) { module_start(); dispatch(3); module_stop(); for (;;) {} }\n"
	bin := elfxtest.CC(t, dir, "kernel", src, "-g", "-O2", "-nostdlib", "-static", "-fno-pie", "-no-pie",
		"-mcmodel=kernel", "-Wl,-Ttext=0xffffffff81000000", "-Wl,--build-id")
	ix, info, err := debuginfo.OpenIndex(bin, debuginfo.Options{NoSearch: true})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Fidelity() != index.FidelityFullInlines || info.DWARFError != "" {
		t.Fatalf("fidelity %v, DWARF error %q", ix.Fidelity(), info.DWARFError)
	}
	if a := elfxtest.SymbolValue(t, bin, "hot"); a < 0xffffffff81000000 {
		t.Fatalf("hot at %#x, not at a kernel address", a)
	}
	n := agreesWithLLVM(t, bin, ix)
	t.Logf("%d addresses agree with llvm-symbolizer", n)
}

// TestKernelDebugFiles checks real kernel debug files, when PROFSYM_KERNEL_DEBUG names the
// root of an unpacked linux-image-*-dbg package (the folder holding usr/lib/debug): every
// address of the code sections of drivers/block/*.ko against llvm-symbolizer on the module
// linked at its layout, and, with PROFSYM_KERNEL_VMLINUX=1 as well, about 2000 addresses
// sampled from vmlinux's functions, with the cost of the index build beside llvm-symbolizer's
// on the same addresses. Debian's 6.1 package is a 1 GB download: not run by default.
func TestKernelDebugFiles(t *testing.T) {
	root := os.Getenv("PROFSYM_KERNEL_DEBUG")
	if root == "" {
		t.Skip("PROFSYM_KERNEL_DEBUG is not set")
	}
	elfxtest.Need(t, "llvm-symbolizer", "ld")
	mods, _ := filepath.Glob(filepath.Join(root, "usr/lib/debug/lib/modules/*/kernel/drivers/block/*.ko"))
	for _, mod := range mods {
		t.Run(filepath.Base(mod), func(t *testing.T) {
			ix, info, err := debuginfo.OpenIndex(mod, debuginfo.Options{NoSearch: true})
			if err != nil {
				t.Fatal(err)
			}
			if info.DWARFError != "" || ix.Fidelity() != index.FidelityFullInlines {
				t.Fatalf("DWARF error %q, fidelity %v, warnings %q", info.DWARFError, ix.Fidelity(), info.Warnings)
			}
			alloc, code := layoutOf(t, mod)
			obj := filepath.Join(t.TempDir(), filepath.Base(mod))
			if err := os.WriteFile(obj, elfxtest.Read(t, mod), 0o644); err != nil {
				t.Fatal(err)
			}
			var script strings.Builder
			script.WriteString("SECTIONS {\n")
			const base = 0x1000000
			for _, s := range alloc {
				fmt.Fprintf(&script, "  %s %#x : { *(%s) }\n", s.name, base+s.addr, s.name)
			}
			script.WriteString("}\n")
			lds := obj + ".ld"
			if err := os.WriteFile(lds, []byte(script.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			linked := obj + ".linked"
			elfxtest.Run(t, "ld", "-T", lds, "--unresolved-symbols=ignore-all", "--noinhibit-exec", "-e", "0", "-o", linked, obj)
			for _, c := range code {
				var addrs, shifted []uint64
				for a := c.addr; a < c.addr+c.size; a++ {
					addrs = append(addrs, a)
					shifted = append(shifted, base+a)
				}
				ours, _ := lookupAll(ix, addrs)
				ref, err := llvmcompare.Tool{}.Symbolize(t.Context(), linked, shifted)
				if err != nil {
					t.Fatal(err)
				}
				rep, err := llvmcompare.Compare(addrs, ours, ref, llvmcompare.ModeFull, llvmcompare.Known...)
				if err != nil {
					t.Fatal(err)
				}
				u := rep.Unexplained()
				t.Logf("%s: %d addresses: chains agree %d (+%d known), lines agree %d of %d (+%d known), %d unexplained",
					c.name, len(addrs), rep.ChainAgree, rep.ChainKnown, rep.LineAgree, rep.LineCompared, rep.LineKnown, len(u))
				for _, d := range u[:min(len(u), 3)] {
					t.Errorf("%s %#x: %s: ours %s, llvm-symbolizer %s", c.name, d.Addr, d.Kind, llvmcompare.Chain(d.Ours), llvmcompare.Chain(d.Ref))
				}
			}
		})
	}
	if os.Getenv("PROFSYM_KERNEL_VMLINUX") == "" {
		return
	}
	vmlinux, _ := filepath.Glob(filepath.Join(root, "usr/lib/debug/boot/vmlinux-*"))
	if len(vmlinux) == 0 {
		t.Fatal("no usr/lib/debug/boot/vmlinux-*")
	}
	t.Run("vmlinux", func(t *testing.T) { kernelImage(t, vmlinux[0]) })
}
