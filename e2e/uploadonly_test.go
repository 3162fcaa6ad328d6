package e2e

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/profsym/profsym/demo/pipeline"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/otlpattr"
)

// uploadOnlyProgram is a binary the symbolizer has never seen: it waits in a loop below two
// named functions.
const uploadOnlyProgram = `#include <unistd.h>
__attribute__((noinline)) int spin_inner(int x) { for (int i = 0; i < 1000; i++) x = x * 7 + i; return x; }
__attribute__((noinline)) int spin_outer(int x) { return spin_inner(x) + 1; }
int main(void) { for (int n = 0;; n++) { spin_outer(n); usleep(100000); } }
`

// TestUploadOnly: the collector in upload-only mode (no sampling, as beside the OpenTelemetry
// eBPF profiler) finds a running binary the symbolizer has never seen and uploads it; a request
// shaped like the eBPF profiler's, which names the binary by its htlhash only, then comes out of
// the gateway symbolized.
func TestUploadOnly(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	root := moduleRoot(t)
	dir := t.TempDir()
	logs, otlpDir := filepath.Join(dir, "logs"), filepath.Join(dir, "otlp")
	for _, d := range []string{logs, otlpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"symbolizer", "gateway", "collector"} {
				t.Logf("%s log (last lines):\n%s", name, pipeline.TailFile(filepath.Join(logs, name+".log"), 25))
			}
		}
	})
	bins, err := pipeline.BuildServices(ctx, root, filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "spin")
	if err := os.WriteFile(prog+".c", []byte(uploadOnlyProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "gcc", "-O2", "-g", "-o", prog, prog+".c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	ids, err := buildid.FromFile(prog)
	if err != nil {
		t.Fatal(err)
	}

	const token = "e2e-upload-only-token"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sym, sp, err := pipeline.StartService(ctx, "symbolizer", filepath.Join(logs, "symbolizer.log"), bins.Symbolizer, 1, 30*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"serve", "--listen", addr, "--store-dir", filepath.Join(dir, "store"), "--upload-token", token},
				"http://" + addr + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sym.Stop(syscall.SIGKILL, time.Second) })
	symURL := "http://127.0.0.1:" + strconv.Itoa(sp[0])

	gw, gp, err := pipeline.StartService(ctx, "gateway", filepath.Join(logs, "gateway.log"), bins.Gateway, 3, 30*time.Second,
		func(p []int) ([]string, string) {
			return []string{
				"--grpc-listen", "127.0.0.1:" + strconv.Itoa(p[0]), "--http-listen", "127.0.0.1:" + strconv.Itoa(p[1]),
				"--admin-listen", "127.0.0.1:" + strconv.Itoa(p[2]), "--symbolizer-url", symURL, "--output-dir", otlpDir,
			}, "http://127.0.0.1:" + strconv.Itoa(p[2]) + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop(syscall.SIGKILL, time.Second) })

	spin, err := pipeline.Start("spin", filepath.Join(logs, "spin.log"), prog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spin.Stop(syscall.SIGKILL, time.Second) })

	col, _, err := pipeline.StartService(ctx, "collector", filepath.Join(logs, "collector.log"), bins.Collector, 1, 60*time.Second,
		func(p []int) ([]string, string) {
			addr := "127.0.0.1:" + strconv.Itoa(p[0])
			return []string{"--upload-only", "--scan-interval", "1s", "--metrics-addr", addr,
				"--symbolizer-url", symURL, "--upload-token-file", tokenFile,
				// The machine's other binaries (MinIO is 150 MB) stay out of the way.
				"--upload-max-bytes", "1048576", "--upload-bytes-per-second", "67108864",
			}, "http://" + addr + "/readyz"
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { col.Stop(syscall.SIGKILL, time.Second) })
	waitForUpload(t, symURL, ids.GNU, 60*time.Second)

	// The OTel eBPF profiler's shape: ELF virtual addresses, the mapping in the same space,
	// the htlhash as the only ID, native frame types, timestamps instead of values.
	lo, hi := funcRange(t, prog, "spin_inner")
	pd := ebpfProfilerRequest(t, prog, ids.HTLHash, lo, hi)
	cc, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(gp[0]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := pprofileotlp.NewGRPCClient(cc).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd)); err != nil {
		t.Fatalf("export to the gateway: %v", err)
	}
	if err := gw.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("stop gateway: %v", err)
	}
	if err := col.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("stop collector: %v", err)
	}
	out, _, err := pipeline.ReadOTLPDir(otlpDir)
	if err != nil {
		t.Fatal(err)
	}
	stacks, err := pipeline.Stacks(out)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(hi - lo)
	if got := pipeline.TotalSamples(stacks); got != want {
		t.Fatalf("gateway wrote %d samples, the request had %d", got, want)
	}
	for _, s := range stacks {
		if len(s.Frames) != 1 || s.Frames[0].Function != "spin_inner" {
			t.Fatalf("frame of the htlhash-only request: %+v, want spin_inner", s.Frames)
		}
	}
	t.Logf("%d addresses named by htlhash only came out symbolized after the upload-only collector uploaded the binary", want)
}

// funcRange returns the ELF virtual address range of a function symbol.
func funcRange(t *testing.T, path, name string) (uint64, uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == name && s.Size > 0 {
			return s.Value, s.Value + s.Size
		}
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return 0, 0
}

// ebpfProfilerRequest makes a request as the OTel eBPF profiler sends one: a sample per
// address in [lo, hi) of path, whose mapping is its executable PT_LOAD in ELF virtual
// addresses and which is named by its htlhash only.
func ebpfProfilerRequest(t *testing.T, path, htlhash string, lo, hi uint64) pprofile.Profiles {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var text *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p
		}
	}
	if text == nil {
		t.Fatalf("%s: no executable PT_LOAD", path)
	}
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	st := d.StringTable()
	for _, s := range []string{"", otlpattr.FrameType, otlpattr.BuildIDHTLHash, "samples", "count", path} {
		st.Append(s)
	}
	at := d.AttributeTable()
	at.AppendEmpty()
	native := at.AppendEmpty()
	native.SetKeyStrindex(1)
	native.Value().SetStr(otlpattr.FrameTypeNative)
	htl := at.AppendEmpty()
	htl.SetKeyStrindex(2)
	htl.Value().SetStr(htlhash)
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	m := d.MappingTable().AppendEmpty()
	m.SetMemoryStart(text.Vaddr)
	m.SetMemoryLimit(text.Vaddr + text.Memsz)
	m.SetFileOffset(text.Off)
	m.SetFilenameStrindex(5)
	m.AttributeIndices().Append(2)

	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutStr("host.name", "node-e2e")
	prof := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(3)
	prof.SampleType().SetUnitStrindex(4)
	now := uint64(time.Now().UnixNano())
	prof.SetTime(pcommon.Timestamp(now))
	for a := lo; a < hi; a++ {
		loc := d.LocationTable().AppendEmpty()
		loc.SetMappingIndex(1)
		loc.SetAddress(a)
		loc.AttributeIndices().Append(1)
		stk := d.StackTable().AppendEmpty()
		stk.LocationIndices().Append(int32(d.LocationTable().Len() - 1))
		s := prof.Samples().AppendEmpty()
		s.SetStackIndex(int32(d.StackTable().Len() - 1))
		s.TimestampsUnixNano().Append(now)
	}
	return pd
}
