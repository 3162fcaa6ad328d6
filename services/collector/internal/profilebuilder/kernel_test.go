package profilebuilder

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles"
	"github.com/profsym/profsym/services/collector/internal/kallsyms"
	"github.com/profsym/profsym/services/collector/internal/kernelid"
)

func elfNote(name string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	n := append([]byte(name), 0)
	_ = binary.Write(&b, binary.LittleEndian, [3]uint32{uint32(len(n)), uint32(len(desc)), typ})
	b.Write(n)
	b.Write(make([]byte, (4-len(n)%4)%4))
	b.Write(desc)
	b.Write(make([]byte, (4-len(desc)%4)%4))
	return b.Bytes()
}

// kernelTree writes a /proc and /sys of a kernel moved by KASLR (0x1d000000, told by its Xen
// entry note) with module brd, whose identity is readable, and module ext4, whose is not.
func kernelTree(t *testing.T, ks kernelid.Symbols) *kernelid.Kernel {
	t.Helper()
	root := t.TempDir()
	files := map[string][]byte{
		"proc/sys/kernel/osrelease": []byte("6.1.0-57-amd64\n"),
		"sys/kernel/notes": append(elfNote("GNU", 3, bytes.Repeat([]byte{0xab}, 20)),
			elfNote("Xen", 1, binary.LittleEndian.AppendUint64(nil, 0xffffffff82000000))...),
		"sys/module/brd/notes/.note.gnu.build-id": elfNote("GNU", 3, bytes.Repeat([]byte{0xcd}, 20)),
		"sys/module/brd/sections/.text":           []byte("0xffffffffc0a00000\n"),
		"sys/module/brd/sections/.init.text":      []byte("0xffffffffc0a08000\n"),
		"sys/module/ext4/sections/.text":          []byte("0xffffffffc0300000\n"),
	}
	for name, data := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k, err := kernelid.Load(kernelid.Options{ProcRoot: filepath.Join(root, "proc"), SysRoot: filepath.Join(root, "sys"), Arch: "amd64"}, ks)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestKernelIdentity: kernel frames keep their kallsyms names and, where the kernel's or the
// module's identity is known, travel as addresses of vmlinux (KASLR undone) or of the
// module's .ko (.text at 0) under a mapping with the file's build ID.
func TestKernelIdentity(t *testing.T) {
	ks, err := kallsyms.Parse(strings.NewReader(strings.Join([]string{
		"ffffffff9e000000 T _text",
		"ffffffff9e000100 t do_work",
		"ffffffff9f000000 T startup_xen",
		"ffffffff9f100000 T _etext",
		"ffffffffa0000000 t bpf_prog_1234\t[bpf]",
		"ffffffffc0300000 t ext4_read\t[ext4]",
		"ffffffffc0a00000 t brd_submit_bio\t[brd]",
		"ffffffffc0a08000 t brd_init\t[brd]",
	}, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	type frame struct {
		addr    uint64
		fn      string
		mapping string
		buildID string
	}
	image := "vmlinux-6.1.0-57-amd64"
	imageID, brdID := strings.Repeat("ab", 20), strings.Repeat("cd", 20)
	tests := []struct {
		name   string
		kernel func(t *testing.T) *kernelid.Kernel
		stack  []uint64
		want   []frame
	}{
		{"identity known", func(t *testing.T) *kernelid.Kernel { return kernelTree(t, ks) },
			[]uint64{0xffffffffc0a00042, 0xffffffff9e000151, 0xffffffffc0300011, 0xffffffffc0a08011, 0xffffffff9f100011},
			[]frame{
				{0x42, "brd_submit_bio", "/lib/modules/6.1.0-57-amd64/brd.ko", brdID},
				{0xffffffff81000150, "do_work", image, imageID},
				// No build ID readable: as without identity.
				{0xffffffffc0300010, "ext4_read", "ext4", ""},
				// In brd's .init.text: not part of the laid-out text.
				{0xffffffffc0a08010, "brd_init", "brd", ""},
				// Past _etext (a trampoline, say): kallsyms names it after the last symbol
				// below, but it is no address of vmlinux.
				{0xffffffff9f100010, "_etext", "vmlinux", ""},
			}},
		{"no identity", func(*testing.T) *kernelid.Kernel { return nil },
			[]uint64{0xffffffffc0a00042, 0xffffffff9e000151},
			[]frame{{0xffffffffc0a00042, "brd_submit_bio", "brd", ""}, {0xffffffff9e000150, "do_work", "vmlinux", ""}}},
		{"offset unknown", func(t *testing.T) *kernelid.Kernel {
			k := kernelTree(t, nil) // without kallsyms the Xen note cannot be used
			if k.Normalizable() {
				t.Fatal("normalizable without an offset")
			}
			return k
		},
			[]uint64{0xffffffff9e000151, 0xffffffffc0a00042},
			[]frame{{0xffffffff9e000151, "do_work", "vmlinux", ""}, {0x41, "brd_submit_bio", "/lib/modules/6.1.0-57-amd64/brd.ko", brdID}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(Options{FrequencyHz: 19, ScopeName: "profsym-collector", KernelID: tt.kernel(t)}, nil, ks)
			t0 := time.Now()
			b.Add(&Sample{Time: t0, PID: 1, TID: 1, Comm: "dd", Kernel: tt.stack})
			out := b.Finish(t0, t0.Add(time.Second))
			if err := otlpprofiles.ValidateStrict(out); err != nil {
				t.Fatalf("ValidateStrict: %v", err)
			}
			d := out.Dictionary()
			smp := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
			locs := d.StackTable().At(int(smp.StackIndex())).LocationIndices()
			if locs.Len() != len(tt.want) {
				t.Fatalf("%d locations, want %d", locs.Len(), len(tt.want))
			}
			for i, w := range tt.want {
				loc := d.LocationTable().At(int(locs.At(i)))
				m := d.MappingTable().At(int(loc.MappingIndex()))
				got := frame{addr: loc.Address(), mapping: d.StringTable().At(int(m.FilenameStrindex())),
					buildID: attrMap(out, m.AttributeIndices())[otlpattr.BuildIDGNU]}
				if loc.Lines().Len() == 1 {
					got.fn = d.StringTable().At(int(d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex())).NameStrindex()))
				}
				if got != w {
					t.Errorf("frame %d = %+v, want %+v", i, got, w)
				}
				if m.MemoryStart() != 0 || m.MemoryLimit() != 0 || m.FileOffset() != 0 {
					t.Errorf("frame %d: mapping [%#x, %#x) offset %#x, want all zero", i, m.MemoryStart(), m.MemoryLimit(), m.FileOffset())
				}
				if a := attrMap(out, m.AttributeIndices()); a[otlpattr.MappingHasFunctions] != "true" {
					t.Errorf("frame %d: mapping attributes %v", i, a)
				}
			}
		})
	}
}
