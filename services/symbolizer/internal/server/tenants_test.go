package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/minio/minio-go/v7"
	goredis "github.com/redis/go-redis/v9"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/degraded"
	"github.com/profsym/profsym/pkg/lease"
	"github.com/profsym/profsym/pkg/testsupport"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/uploadcli"
)

const (
	alphaUpload = "alpha-upload-token"
	alphaRead   = "alpha-read-token"
	betaUpload  = "beta-upload-token"
	gammaUpload = "gamma-upload-token"
	deltaUpload = "delta-upload-token"
)

// caller is one credential: a token, and the tenant it names in X-Profsym-Tenant ("": none).
type caller struct {
	token, tenant string
}

func (c caller) set(h http.Header) {
	h.Set("Authorization", "Bearer "+c.token)
	if c.tenant != "" {
		h.Set("X-Profsym-Tenant", c.tenant)
	}
}

func (c caller) conn(url string) uploadcli.Conn {
	return uploadcli.Conn{Server: url, Token: c.token, Tenant: c.tenant, Timeout: time.Minute}
}

func req[T any](c caller, msg *T) *connect.Request[T] {
	r := connect.NewRequest(msg)
	c.set(r.Header())
	return r
}

// get is a GET as c: the status and body.
func (c caller) get(t *testing.T, url string) (int, string) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.set(r.Header)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b.String()
}

func tenantsFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tenants")
	body := "# tenant role token\n" +
		"alpha upload " + alphaUpload + "\n" +
		"alpha read " + alphaRead + "\n" +
		"beta upload " + betaUpload + "\n" +
		"gamma upload " + gammaUpload + "\n" +
		"gamma quota uploads-per-day=1\n" +
		"delta upload " + deltaUpload + "\n" +
		"delta quota bytes=1000\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// Tenants on one bucket and one Redis: every API, asked with another tenant's build IDs,
// upload IDs and tokens, reads, lists and tells nothing of them; each tenant's data lives
// under its own prefix and keys, the default tenant's where a symbolizer without tenants
// keeps it; quotas refuse with a clear error.
func TestTenantsKeptApart(t *testing.T) {
	t.Run("s3", func(t *testing.T) {
		m := testsupport.StartMinIO(t)
		mc := m.NewBucket(t, "debuginfo")
		keys := func(prefix string) []string {
			var out []string
			for o := range mc.ListObjects(context.Background(), "debuginfo", minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				out = append(out, o.Key)
			}
			return out
		}
		read := func(key string) string {
			o, err := mc.GetObject(context.Background(), "debuginfo", key, minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			var b bytes.Buffer
			if _, err := b.ReadFrom(o); err != nil {
				t.Fatal(err)
			}
			return b.String()
		}
		testTenantsKeptApart(t, keys, read, "--s3-endpoint", m.Endpoint(), "--s3-bucket", "debuginfo", "--s3-region", m.Region(),
			"--s3-access-key", m.AccessKey(), "--s3-secret-key", m.SecretKey(), "--s3-insecure")
	})
	t.Run("folder", func(t *testing.T) {
		dir := t.TempDir()
		keys := func(prefix string) []string {
			var out []string
			err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				if rel = filepath.ToSlash(rel); strings.HasPrefix(rel, prefix) {
					out = append(out, rel)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		read := func(key string) string {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(key)))
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		testTenantsKeptApart(t, keys, read, "--store-dir", dir)
	})
}

func testTenantsKeptApart(t *testing.T, storeKeys func(prefix string) []string, read func(key string) string, storeArgs ...string) {
	rd := testsupport.StartRedis(t)
	r := start(t, append(storeArgs, "--redis-url", rd.URL(), "--tenant-tokens-file", tenantsFile(t),
		"--coverage-interval", "50ms", "--usage-interval", "50ms")...)
	ctx := context.Background()
	alpha, alphaR, beta, gamma := caller{token: alphaUpload}, caller{token: alphaRead}, caller{token: betaUpload}, caller{token: gammaUpload}
	operator := caller{token: token}
	asAlpha, asBeta := caller{token: token, tenant: "alpha"}, caller{token: token, tenant: "beta"}

	// alpha stores a binary; the default tenant another.
	binA, binD := compile(t, "-g", "-O2"), compile(t, "-g", "-O1")
	up := func(c caller, path string) uploadcli.Result {
		t.Helper()
		var out, errb bytes.Buffer
		cmd := &uploadcli.UploadCmd{Conn: c.conn(r.url), Paths: []string{path}, Parallel: 1, Source: "ci", Type: "auto", Retries: 1,
			Progress: "plain", Out: &out, Err: &errb}
		res, err := cmd.Upload(ctx)
		if err != nil {
			t.Fatalf("upload: %v", err)
		}
		return res[0]
	}
	if res := up(alpha, binA.path); res.Outcome != "uploaded" {
		t.Fatalf("alpha's upload = %+v", res)
	}
	if res := up(operator, binD.path); res.Outcome != "uploaded" {
		t.Fatalf("the default tenant's upload = %+v", res)
	}
	// An upload of alpha's left in progress (a third build): its pending state is alpha's too.
	binP := compile(t, "-g", "-O3")
	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	sc := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	pdata, err := os.ReadFile(binP.path)
	if err != nil {
		t.Fatal(err)
	}
	psum := sha256Sum(pdata)
	desc := func(b binary, sha string, size int) *debuginfov1.ShouldUploadRequest {
		return &debuginfov1.ShouldUploadRequest{BuildId: b.ids.GNU, BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU,
			Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO, Sha256: sha, Size: uint64(size), Source: debuginfov1.UploadSource_UPLOAD_SOURCE_CI}
	}
	initiate := func(c caller, d *debuginfov1.ShouldUploadRequest) (*connect.Response[debuginfov1.InitiateUploadResponse], error) {
		return dc.InitiateUpload(ctx, req(c, &debuginfov1.InitiateUploadRequest{BuildId: d.BuildId, BuildIdType: d.BuildIdType,
			Type: d.Type, Sha256: d.Sha256, Size: d.Size, Source: d.Source}))
	}
	pending, err := initiate(alpha, desc(binP, hexOf(psum[:]), len(pdata)))
	if err != nil {
		t.Fatal(err)
	}
	// alpha symbolizes its binary: results in Redis, coverage and usage written.
	symbolize := func(c caller, b binary) *symbolizerv1.ModuleResult {
		t.Helper()
		resp, err := sc.Symbolize(ctx, req(c, &symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{
			{GnuBuildId: b.ids.GNU, Addresses: b.addrs, Filename: "/opt/" + filepath.Base(b.path)}}}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.Modules[0]
	}
	sameLocations(t, "alpha", symbolize(alpha, binA), engineFrames(t, binA.path, binA.addrs))
	sameLocations(t, "alpha's read token", symbolize(alphaR, binA), engineFrames(t, binA.path, binA.addrs))
	sameLocations(t, "the operator for alpha", symbolize(asAlpha, binA), engineFrames(t, binA.path, binA.addrs))
	sameLocations(t, "default", symbolize(operator, binD), engineFrames(t, binD.path, binD.addrs))

	// alpha's record page shows its file (so the checks below can see one).
	dataA, err := os.ReadFile(binA.path)
	if err != nil {
		t.Fatal(err)
	}
	sumA := sha256Sum(dataA)
	shaA := hexOf(sumA[:])
	if code, page := alphaR.get(t, r.url+"/ui/buildid/gnu/"+binA.ids.GNU); code != http.StatusOK || !strings.Contains(page, shaA) {
		t.Fatalf("alpha's record page: %d\n%s", code, page)
	}

	// Every way beta, and the default tenant, could learn of alpha's build IDs.
	aIDs := []string{binA.ids.GNU, binP.ids.GNU}
	mentions := func(what, s string) {
		t.Helper()
		for _, id := range aIDs {
			if strings.Contains(s, id) {
				t.Errorf("%s mentions alpha's build ID %s:\n%s", what, id, s)
			}
		}
	}
	for _, c := range []caller{beta, asBeta, operator} {
		name := "beta"
		if c == operator {
			name = "default"
		}
		// ShouldUpload: "nothing is stored", not "already stored" nor "in progress".
		for _, b := range []binary{binA, binP} {
			data, err := os.ReadFile(b.path)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256Sum(data)
			su, err := dc.ShouldUpload(ctx, req(c, desc(b, hexOf(sum[:]), len(data))))
			if err != nil {
				t.Fatal(err)
			}
			if !su.Msg.ShouldUpload || su.Msg.Reason != debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_FIRST {
				t.Errorf("%s ShouldUpload of alpha's %s = %v", name, b.ids.GNU, su.Msg)
			}
		}
		if _, err := dc.Get(ctx, req(c, &debuginfov1.GetRequest{BuildId: binA.ids.GNU})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s Get of alpha's build ID: %v", name, err)
		}
		if _, err := dc.Get(ctx, req(c, &debuginfov1.GetRequest{BuildId: binA.ids.HTLHash})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s Get of alpha's htlhash: %v", name, err)
		}
		list, err := dc.List(ctx, req(c, &debuginfov1.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		mentions(name+" List", list.Msg.String())
		if _, err := dc.FinishUpload(ctx, req(c, &debuginfov1.FinishUploadRequest{BuildId: binP.ids.GNU, UploadId: pending.Msg.UploadId})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s FinishUpload of alpha's upload: %v", name, err)
		}
		// Symbolize: not found, no frames.
		m := symbolize(c, binA)
		if m.GetStatus() != symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND {
			t.Errorf("%s Symbolize of alpha's binary: %v %s", name, m.GetStatus(), m.GetMessage())
		}
		// The debuginfod paths and the pages.
		for _, p := range []string{"/buildid/" + binA.ids.GNU + "/debuginfo", "/buildid/" + binA.ids.GNU + "/executable"} {
			code, body := c.get(t, r.url+p)
			if code != http.StatusNotFound {
				t.Errorf("%s GET %s = %d", name, p, code)
			}
			mentions(name+" GET "+p, body)
		}
		// The record page shows what the caller's tenant knows: that it asked about the
		// binary (its own coverage), nothing of alpha's file.
		if code, page := c.get(t, r.url+"/ui/buildid/gnu/"+binA.ids.GNU); code != http.StatusOK || strings.Contains(page, shaA) ||
			strings.Contains(page, "/buildid/"+binA.ids.GNU+"/debuginfo") {
			t.Errorf("%s record page of alpha's binary: %d\n%s", name, code, page)
		}
		if _, page := c.get(t, r.url+"/ui/"); strings.Contains(page, shaA) || strings.Contains(page, binP.ids.GNU) {
			t.Errorf("%s page lists alpha's binaries:\n%s", name, page)
		}
		// The raw PUT of alpha's upload.
		put, err := http.NewRequestWithContext(ctx, http.MethodPut, r.url+"/upload/"+pending.Msg.UploadId, bytes.NewReader(pdata))
		if err != nil {
			t.Fatal(err)
		}
		c.set(put.Header)
		if resp, err := http.DefaultClient.Do(put); err != nil {
			t.Fatal(err)
		} else if resp.Body.Close(); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s PUT of alpha's upload = %d", name, resp.StatusCode)
		}
		// Deleting alpha's binary finds nothing.
		if _, err := dc.Delete(ctx, req(c, &debuginfov1.DeleteRequest{BuildId: binA.ids.GNU})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s Delete of alpha's build ID: %v", name, err)
		}
	}
	// Coverage, once alpha's tally shows its binary resolved, and the commands.
	for deadline := time.Now().Add(20 * time.Second); ; {
		cov, err := dc.ListCoverage(ctx, req(alphaR, &debuginfov1.ListCoverageRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range cov.Msg.GetEntries() {
			found = found || e.GetBuildId() == binA.ids.GNU && e.GetFramesResolved() > 0
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alpha's coverage never showed its binary: %v", cov.Msg.GetEntries())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range []caller{beta, operator} {
		cov, err := dc.ListCoverage(ctx, req(c, &debuginfov1.ListCoverageRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		// beta and the default tenant asked about alpha's binary: their own coverage says
		// they lack it (no debuginfo), which is all they learn.
		for _, e := range cov.Msg.GetEntries() {
			if e.GetBuildId() == binA.ids.GNU && e.GetFramesResolved() != 0 {
				t.Errorf("coverage of %+v shows alpha's binary resolved: %v", c, e)
			}
		}
		var out bytes.Buffer
		if err := (&uploadcli.ListCmd{Conn: c.conn(r.url), Out: &out}).Run(); err != nil {
			t.Fatal(err)
		}
		if err := (&uploadcli.UsageCmd{Conn: c.conn(r.url), Out: &out}).Run(); err != nil {
			t.Fatal(err)
		}
		mentions("debuginfo list and usage", out.String())
		if err := (&uploadcli.GetCmd{Conn: c.conn(r.url), BuildID: binA.ids.GNU, Out: &out}).Run(); err == nil {
			t.Errorf("debuginfo get of alpha's build ID as %+v found it", c)
		}
	}
	// alpha sees its own, and nothing of the default tenant's.
	var out bytes.Buffer
	if err := (&uploadcli.ListCmd{Conn: alphaR.conn(r.url), Out: &out}).Run(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), binA.ids.GNU) || strings.Contains(out.String(), binD.ids.GNU) {
		t.Errorf("alpha's list:\n%s", out.String())
	}
	out.Reset()
	if err := (&uploadcli.ListCmd{Conn: asAlpha.conn(r.url), Out: &out}).Run(); err != nil || !strings.Contains(out.String(), binA.ids.GNU) {
		t.Errorf("the operator's list for alpha: %v\n%s", err, out.String())
	}
	if code, _ := alphaR.get(t, r.url+"/buildid/"+binD.ids.GNU+"/debuginfo"); code != http.StatusNotFound {
		t.Errorf("alpha reads the default tenant's file: %d", code)
	}
	if code, body := alphaR.get(t, r.url+"/buildid/"+binA.ids.GNU+"/debuginfo"); code != http.StatusOK || len(body) == 0 {
		t.Errorf("alpha reads its own file: %d", code)
	}
	if m := symbolize(alpha, binD); m.GetStatus() != symbolizerv1.ModuleStatus_MODULE_STATUS_NOT_FOUND {
		t.Errorf("alpha symbolizes the default tenant's binary: %v", m.GetStatus())
	}

	// Tokens: a tenant's token acts for its tenant only, a read token does not write, a
	// header names only a tenant the file knows, and with tenants every read needs a token.
	if _, err := dc.List(ctx, req(caller{token: alphaUpload, tenant: "beta"}, &debuginfov1.ListRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("alpha's token naming beta: %v", err)
	}
	if _, err := dc.Delete(ctx, req(alphaR, &debuginfov1.DeleteRequest{BuildId: binA.ids.GNU})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("alpha's read token deletes: %v", err)
	}
	if _, err := dc.List(ctx, req(caller{token: token, tenant: "epsilon"}, &debuginfov1.ListRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a header naming an unknown tenant: %v", err)
	}
	if _, err := dc.List(ctx, connect.NewRequest(&debuginfov1.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a read without a token: %v", err)
	}
	if code := authGet(t, r.url+"/metrics", alphaUpload); code != http.StatusForbidden {
		t.Errorf("a tenant's token reads /metrics (names of every tenant's binaries): %d", code)
	}

	// beta uploads the very same file: it is beta's first, and beta's alone.
	if res := up(beta, binA.path); res.Outcome != "uploaded" {
		t.Fatalf("beta's upload of the same file = %+v", res)
	}
	sameLocations(t, "beta", symbolize(beta, binA), engineFrames(t, binA.path, binA.addrs))
	if _, err := dc.Delete(ctx, req(beta, &debuginfov1.DeleteRequest{BuildId: binA.ids.GNU})); err != nil {
		t.Fatal(err)
	}
	sameLocations(t, "alpha after beta's delete", symbolize(alpha, binA), engineFrames(t, binA.path, binA.addrs))

	// Quotas: gamma may start one upload a day.
	if res := up(gamma, binD.path); res.Outcome != "uploaded" {
		t.Fatalf("gamma's first upload = %+v", res)
	}
	_, err = initiate(gamma, desc(binP, hexOf(psum[:]), len(pdata)))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "tenant gamma: over quota: 1 uploads started today (UTC) of 1 a day") {
		t.Errorf("gamma's second upload: %v", err)
	}
	// What the uploader is told.
	if res := up(gamma, binP.path); res.Err == nil || !strings.Contains(res.Err.Error(), "resource_exhausted") ||
		!strings.Contains(res.Err.Error(), "tenant gamma: over quota: 1 uploads started today (UTC) of 1 a day") {
		t.Errorf("gamma's second upload with the CLI: %+v", res)
	}
	// delta may store 1000 bytes.
	if res := up(caller{token: deltaUpload}, binD.path); res.Err == nil ||
		!strings.Contains(res.Err.Error(), fmt.Sprintf("tenant delta: over quota: 0 bytes stored and %d more would pass its 1000 bytes", fileSize(t, binD.path))) {
		t.Errorf("delta's upload over its bytes: %+v", res)
	}
	if res := up(operator, binP.path); res.Outcome != "uploaded" {
		t.Errorf("the default tenant has no quota: %+v", res)
	}

	// alpha's coverage tally is written behind its lookups (--coverage-interval): wait for it.
	for deadline := time.Now().Add(20 * time.Second); len(storeKeys("tenants/alpha/coverage/")) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("alpha's coverage tally was never written under tenants/alpha/coverage/")
		}
	}
	// Layout: the default tenant's records where they always were; each tenant's under its
	// prefix; nothing of a tenant outside it.
	for _, c := range []struct {
		prefix string
		want   string
		not    string
	}{
		{"records/gnu/", binD.ids.GNU, binA.ids.GNU},
		{"tenants/alpha/records/gnu/", binA.ids.GNU, binD.ids.GNU},
		{"tenants/alpha/uploads-index/", pending.Msg.UploadId, ""},
		{"tenants/alpha/coverage/", "", ""},
		{"tenants/gamma/records/gnu/", binD.ids.GNU, binA.ids.GNU},
	} {
		keys := strings.Join(storeKeys(c.prefix), "\n")
		if keys == "" || !strings.Contains(keys, c.want) || (c.not != "" && strings.Contains(keys, c.not)) {
			t.Errorf("store under %s:\n%s", c.prefix, keys)
		}
	}
	// alpha's usage record (the record of last use retention reads) is alpha's.
	usageOf := func(prefix string) string {
		var all strings.Builder
		for _, k := range storeKeys(prefix) {
			all.WriteString(read(k))
		}
		return all.String()
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(usageOf("tenants/alpha/usage/"), binA.ids.GNU); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("alpha's usage records do not name its binary: %v", storeKeys("tenants/alpha/usage/"))
		}
	}
	if u := usageOf("usage/"); strings.Contains(u, binA.ids.GNU) || !strings.Contains(u, binD.ids.GNU) {
		t.Errorf("the default tenant's usage records:\n%s", u)
	}
	for _, k := range storeKeys("") {
		if !strings.HasPrefix(k, "tenants/") && strings.Contains(k, binA.ids.GNU) {
			t.Errorf("alpha's build ID outside tenants/alpha/: %s", k)
		}
	}
	// Redis: alpha's results under its keys, the default tenant's where they always were.
	rcl := goredis.NewClient(&goredis.Options{Addr: rd.Addr()})
	defer rcl.Close()
	for pattern, id := range map[string]string{"tenants/alpha/psym:v3:" + binA.ids.GNU + "@*": binA.ids.GNU, "psym:v3:" + binD.ids.GNU + "@*": binD.ids.GNU} {
		if n := len(rcl.Keys(ctx, pattern).Val()); n == 0 {
			t.Errorf("no Redis keys %s", pattern)
		}
		_ = id
	}
	if n := len(rcl.Keys(ctx, "psym:v3:"+binA.ids.GNU+"@*").Val()); n != 0 {
		t.Errorf("%d Redis keys of alpha's binary outside its part", n)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

// Leases on a real Redis: a tenant's record, build and sweep leases hold up that tenant only;
// the default tenant's keys are the ones a symbolizer without tenants takes.
func TestTenantLeasesKeptApart(t *testing.T) {
	rd := testsupport.StartRedis(t)
	rcl := goredis.NewClient(&goredis.Options{Addr: rd.Addr()})
	defer rcl.Close()
	ctx := context.Background()
	l := newLeaseLocks(lease.New(rcl, lease.Options{TTL: time.Minute, Timeout: 5 * time.Second}),
		degraded.New("redis leases", "test", time.Minute, nil))
	const key = "records/gnu/0123456789abcdef0123456789abcdef01234567"
	unlock, err := l.catalog("alpha").Lock(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if n := rcl.Exists(ctx, "profsym:lease:tenants/alpha/"+key).Val(); n != 1 {
		t.Fatalf("alpha's record lease is not under its key (%d)", n)
	}
	if _, err := l.catalog("alpha").Lock(ctx, key, 10*time.Millisecond); !errors.Is(err, catalog.ErrLocked) {
		t.Fatalf("alpha's second lock: %v, want held", err)
	}
	for _, other := range []string{"beta", ""} {
		u, err := l.catalog(other).Lock(ctx, key, 10*time.Millisecond)
		if err != nil {
			t.Fatalf("tenant %q held up by alpha's lease: %v", other, err)
		}
		u()
		ub, ok, err := l.builds(other).TryLock(ctx, key)
		if err != nil || !ok {
			t.Fatalf("tenant %q build lock: %v %v", other, ok, err)
		}
		ub()
	}
	unlock()
	u, err := l.catalog("").Lock(ctx, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := rcl.Exists(ctx, "profsym:lease:"+key).Val(); n != 1 {
		t.Errorf("the default tenant's lease is not where it always was (%d)", n)
	}
	u()
}

// A tenant added to the file is served after a reload (SIGHUP), with its background work
// running; a broken file leaves the tenants in force.
func TestTenantsReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tenants")
	if err := os.WriteFile(file, []byte("alpha upload "+alphaUpload+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := start(t, "--tenant-tokens-file", file, "--coverage-interval", "50ms")
	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	sc := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	zeta := caller{token: "zeta-upload-token"}
	if _, err := dc.List(t.Context(), req(zeta, &debuginfov1.ListRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("zeta before it is added: %v", err)
	}
	if err := os.WriteFile(file, []byte("alpha upload "+alphaUpload+"\nzeta upload zeta-upload-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.srv.tenantsReload()
	missing := strings.Repeat("cd", 20)
	if _, err := sc.Symbolize(t.Context(), req(zeta, &symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: missing, Addresses: []uint64{1}}}})); err != nil {
		t.Fatalf("zeta after the reload: %v", err)
	}
	// zeta's coverage tally is written to its part of the store: its stack runs.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		keys, err := r.srv.Store.List(t.Context(), "tenants/zeta/coverage/")
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("zeta's coverage tally was never written")
		}
	}
	if err := os.WriteFile(file, []byte("zeta upload\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.srv.tenantsReload()
	if _, err := dc.List(t.Context(), req(caller{token: alphaUpload}, &debuginfov1.ListRequest{})); err != nil {
		t.Fatalf("alpha after a broken reload: %v", err)
	}
}
