package kernelid

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/profsym/profsym/services/collector/internal/kallsyms"
)

func note(name string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	n := append([]byte(name), 0)
	_ = binary.Write(&b, le, [3]uint32{uint32(len(n)), uint32(len(desc)), typ})
	b.Write(n)
	b.Write(make([]byte, (4-len(n)%4)%4))
	b.Write(desc)
	b.Write(make([]byte, (4-len(desc)%4)%4))
	return b.Bytes()
}

var buildID = []byte{0x32, 0xa7, 0xf3, 0xba, 0xce, 0xe6, 0xbf, 0x69, 0xda, 0x94, 0xf4, 0x97, 0xa8, 0xa0, 0x76, 0x48, 0x3b, 0xae, 0xa2, 0x0e}

const buildIDHex = "32a7f3bacee6bf69da94f497a8a076483baea20e"

// kcore is an ELF core file with one PT_NOTE segment, as /proc/kcore starts.
func kcore(notes []byte) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF\x02\x01\x01")
	le.PutUint16(hdr[16:], 4)  // ET_CORE
	le.PutUint16(hdr[18:], 62) // EM_X86_64
	le.PutUint32(hdr[20:], 1)
	le.PutUint64(hdr[32:], 64) // e_phoff
	le.PutUint16(hdr[52:], 64)
	le.PutUint16(hdr[54:], 56)
	le.PutUint16(hdr[56:], 1)
	b.Write(hdr)
	ph := make([]byte, 56)
	le.PutUint32(ph[0:], 4) // PT_NOTE
	le.PutUint64(ph[8:], 64+56)
	le.PutUint64(ph[32:], uint64(len(notes)))
	b.Write(ph)
	b.Write(notes)
	return b.Bytes()
}

type tree struct{ proc, sys string }

func newTree(t *testing.T, files map[string][]byte) tree {
	t.Helper()
	root := t.TempDir()
	tr := tree{proc: filepath.Join(root, "proc"), sys: filepath.Join(root, "sys")}
	files["proc/sys/kernel/osrelease"] = []byte("6.1.0-57-amd64\n")
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

func syms(t *testing.T, lines ...string) *kallsyms.Table {
	t.Helper()
	k, err := kallsyms.Parse(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestOffsetSources(t *testing.T) {
	gnu := note("GNU", 3, buildID)
	xen := note("Xen", 1, binary.LittleEndian.AppendUint64(nil, 0xffffffff82e5c000))
	moved := syms(t, "ffffffff9e000000 T _text", "ffffffff9fe5c000 T startup_xen")
	unmoved := syms(t, "ffffffff81000000 T _text", "ffffffff82e5c000 T startup_xen")
	vmcore := kcore(note("VMCOREINFO", 0, []byte("OSRELEASE=6.1.0-57-amd64\nKERNELOFFSET=1d000000\nNUMBER(phys_base)=0\n")))
	tests := []struct {
		name     string
		files    map[string][]byte
		syms     Symbols
		arch     string
		source   string
		offset   uint64
		errMatch string
	}{
		{"vmcoreinfo", map[string][]byte{"sys/kernel/notes": gnu, "proc/kcore": vmcore}, moved, "amd64", SourceVmcoreinfo, 0x1d000000, ""},
		{"vmcoreinfo on arm64", map[string][]byte{"sys/kernel/notes": gnu, "proc/kcore": vmcore}, nil, "arm64", SourceVmcoreinfo, 0x1d000000, ""},
		{"xen entry note", map[string][]byte{"sys/kernel/notes": append(gnu, xen...)}, moved, "amd64", SourceXenEntry, 0x1d000000, ""},
		{"nokaslr", map[string][]byte{"sys/kernel/notes": gnu, "proc/cmdline": []byte("root=/dev/vda nokaslr quiet\n")}, moved, "arm64", SourceNoKASLR, 0, ""},
		{"default base", map[string][]byte{"sys/kernel/notes": gnu}, unmoved, "amd64", SourceDefaultBase, 0, ""},
		{"moved, no source", map[string][]byte{"sys/kernel/notes": gnu}, moved, "amd64", "", 0, "KASLR offset unknown"},
		{"arm64 without kcore", map[string][]byte{"sys/kernel/notes": gnu}, unmoved, "arm64", "", 0, "KASLR offset unknown"},
		{"kcore without VMCOREINFO", map[string][]byte{"sys/kernel/notes": gnu, "proc/kcore": kcore(note("CORE", 1, make([]byte, 8)))}, moved, "amd64", "", 0, "no VMCOREINFO note"},
		{"bad KERNELOFFSET", map[string][]byte{"sys/kernel/notes": gnu, "proc/kcore": kcore(note("VMCOREINFO", 0, []byte("KERNELOFFSET=zz\n")))}, moved, "amd64", "", 0, `KERNELOFFSET="zz"`},
		{"not an ELF kcore", map[string][]byte{"sys/kernel/notes": gnu, "proc/kcore": []byte("garbage")}, moved, "amd64", "", 0, "vmcoreinfo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTree(t, tt.files)
			k, err := Load(Options{ProcRoot: tr.proc, SysRoot: tr.sys, Arch: tt.arch}, tt.syms)
			if err != nil {
				t.Fatal(err)
			}
			if k.Release != "6.1.0-57-amd64" || k.BuildID != buildIDHex {
				t.Fatalf("release %q build ID %q", k.Release, k.BuildID)
			}
			if k.Source != tt.source || k.Offset != tt.offset {
				t.Fatalf("offset %#x from %q (%v), want %#x from %q", k.Offset, k.Source, k.OffsetErr, tt.offset, tt.source)
			}
			if tt.errMatch != "" && (k.OffsetErr == nil || !strings.Contains(k.OffsetErr.Error(), tt.errMatch)) {
				t.Fatalf("offset error %v, want it to say %q", k.OffsetErr, tt.errMatch)
			}
			if tt.source == "" && !errors.Is(k.OffsetErr, ErrNoOffset) {
				t.Fatalf("offset error %v is not ErrNoOffset", k.OffsetErr)
			}
			if got := k.Normalizable(); got != (tt.source != "") {
				t.Fatalf("Normalizable = %v", got)
			}
			if tt.source != "" {
				if got := k.Normalize(0xffffffff81123456 + tt.offset); got != 0xffffffff81123456 {
					t.Fatalf("Normalize = %#x, want the link-time address 0xffffffff81123456", got)
				}
			}
		})
	}
}

func TestNoBuildID(t *testing.T) {
	tr := newTree(t, map[string][]byte{"sys/kernel/notes": note("Linux", 0x100, []byte("6.1.0\x00"))})
	k, err := Load(Options{ProcRoot: tr.proc, SysRoot: tr.sys, Arch: "amd64"}, syms(t, "ffffffff81000000 T _text"))
	if err != nil {
		t.Fatal(err)
	}
	if k.BuildID != "" || k.Normalizable() {
		t.Fatalf("build ID %q, normalizable %v", k.BuildID, k.Normalizable())
	}
	if _, err := Load(Options{ProcRoot: t.TempDir(), SysRoot: tr.sys}, nil); err == nil || !strings.Contains(err.Error(), "kernel release") {
		t.Fatalf("no osrelease: %v", err)
	}
}

func TestModules(t *testing.T) {
	modNote := note("GNU", 3, []byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4})
	tr := newTree(t, map[string][]byte{
		"sys/kernel/notes":                                  note("GNU", 3, buildID),
		"sys/module/brd/notes/.note.gnu.build-id":           modNote,
		"sys/module/brd/sections/.text":                     []byte("0xffffffffc0a01000\n"),
		"sys/module/brd/sections/.text.unlikely":            []byte("0xffffffffc0a01b30\n"),
		"sys/module/brd/sections/.rodata":                   []byte("0xffffffffc0a03000\n"),
		"sys/module/brd/sections/.init.text":                []byte("0xffffffffc0a09000\n"),
		"sys/module/brd/sections/.gnu.linkonce.this_module": []byte("0xffffffffc0a05000\n"),
		"sys/module/hidden/notes/.note.gnu.build-id":        modNote,
		"sys/module/hidden/sections/.text":                  []byte("0x0000000000000000\n"),
		"sys/module/nonotes/sections/.text":                 []byte("0xffffffffc0b00000\n"),
	})
	k, err := Load(Options{ProcRoot: tr.proc, SysRoot: tr.sys, Arch: "amd64"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	brd := k.Module("brd")
	if brd.Err != nil || brd.BuildID != "deadbeef01020304" || brd.Text != 0xffffffffc0a01000 {
		t.Fatalf("brd = %+v", brd)
	}
	if k.Module("brd") != brd {
		t.Fatal("a second lookup read the module again")
	}
	if !k.InText(0xffffffffc0a01000) {
		t.Fatal("without kallsyms every address counts as text")
	}
	if k.Module("brd") != brd {
		t.Fatal("a second lookup read the module again")
	}
	for _, tc := range []struct {
		addr uint64
		want uint64
		ok   bool
	}{
		{0xffffffffc0a01000, 0, true},
		{0xffffffffc0a0123f, 0x23f, true},
		{0xffffffffc0a01b34, 0xb34, true}, // .text.unlikely: the layout goes on from .text
		{0xffffffffc0a09010, 0, false},    // .init.text
		{0xffffffffc0a00ff0, 0, false},    // below .text
	} {
		got, ok := brd.NormalizeModule(tc.addr)
		if got != tc.want || ok != tc.ok {
			t.Errorf("NormalizeModule(%#x) = %#x, %v; want %#x, %v", tc.addr, got, ok, tc.want, tc.ok)
		}
	}
	for name, want := range map[string]string{
		"hidden":  "no readable address of its .text",
		"nonotes": "build ID",
		"absent":  "build ID",
		"../x":    "module name",
	} {
		m := k.Module(name)
		if m.Err == nil || !strings.Contains(m.Err.Error(), want) {
			t.Errorf("module %q: err %v, want %q", name, m.Err, want)
		}
		if _, ok := m.NormalizeModule(0xffffffffc0b00010); ok {
			t.Errorf("module %q normalized", name)
		}
	}
}

// TestThisKernel reads the identity of the kernel the test runs on.
func TestThisKernel(t *testing.T) {
	ks, err := kallsyms.Load("/proc/kallsyms")
	if err != nil {
		t.Skipf("kallsyms: %v", err)
	}
	k, err := Load(Options{}, ks)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if k.Release != strings.TrimSpace(string(rel)) {
		t.Fatalf("release %q", k.Release)
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(k.BuildID) {
		t.Fatalf("build ID %q", k.BuildID)
	}
	t.Logf("kernel %s build ID %s offset %#x from %q (%v)", k.Release, k.BuildID, k.Offset, k.Source, k.OffsetErr)
	if k.Source != "" {
		text, _ := ks.Address("_text")
		if n := k.Normalize(text); n&0xfff != text&0xfff || n < 0xffff000000000000 {
			t.Fatalf("_text %#x normalizes to %#x", text, n)
		}
	}
}
