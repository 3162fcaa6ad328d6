// Package uploadcli is the client side of the debuginfo store: `symbolizer upload`, which CI
// pipelines run to send what they built, and `symbolizer debuginfo list|get|delete` against a
// server. The upload protocol is pkg/uploadclient's, shared with the node collector; each
// step is retried at once (uploadclient.Retry), since a CI job has no later sighting to wait
// for.
package uploadcli

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"
	"github.com/schollz/progressbar/v3"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	"github.com/profsym/profsym/pkg/binaryid"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/keylock"
	"github.com/profsym/profsym/pkg/uploadclient"
)

// Conn holds the flags shared by every command that talks to a server.
type Conn struct {
	Server    string        `required:"" env:"SYMBOLIZER_SERVER" help:"Base URL of the symbolizer, e.g. http://symbolizer:7070."`
	Token     string        `env:"SYMBOLIZER_TOKEN" help:"Bearer token."`
	TokenFile string        `name:"token-file" env:"SYMBOLIZER_TOKEN_FILE" type:"path" help:"File holding the bearer token."`
	Timeout   time.Duration `default:"2m" env:"SYMBOLIZER_CLIENT_TIMEOUT" help:"Timeout of one RPC."`
	Tenant    string        `env:"SYMBOLIZER_TENANT" help:"Tenant to act for, with a token that belongs to no tenant (an operator's); a tenant's own token acts for its tenant without it."`
}

func (c *Conn) token() (string, error) {
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return "", fmt.Errorf("read token file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return c.Token, nil
}

// client reads the token once: a command is short-lived, and a token file it cannot read is
// an error before anything is sent.
func (c *Conn) client(httpClient *http.Client) (*uploadclient.Client, error) {
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	client, err := uploadclient.New(uploadclient.Options{Server: c.Server, Token: func() (string, error) { return tok, nil },
		RPCTimeout: c.Timeout, HTTPClient: httpClient, Tenant: c.Tenant})
	if err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	return client, nil
}

// rpc is the DebuginfoService client for the commands that are not uploads.
func (c *Conn) rpc(httpClient *http.Client) (debuginfov1connect.DebuginfoServiceClient, error) {
	client, err := c.client(httpClient)
	if err != nil {
		return nil, err
	}
	return client.RPC(), nil
}

// UploadCmd is `symbolizer upload`.
type UploadCmd struct {
	Conn
	Paths    []string `arg:"" type:"path" help:"ELF files or directories (searched recursively for ELF files)."`
	Parallel int      `default:"4" env:"SYMBOLIZER_UPLOAD_PARALLEL" help:"Files uploaded at once (files of one build ID, such as an executable and its debug file, go one after the other, the one with DWARF first)."`
	Source   string   `default:"ci" enum:"ci,node,debuginfod" env:"SYMBOLIZER_UPLOAD_SOURCE" help:"Where the files come from: ci, node or debuginfod."`
	Type     string   `default:"auto" enum:"auto,debuginfo,executable" help:"Kind of file; auto: debuginfo when it has DWARF, else executable. Supplementary DWARF files (dwz -m) and DWARF packages (.dwp) are recognized either way."`
	// PackageOf names the executable of a DWARF package that has none beside it.
	PackageOf string `name:"package-of" placeholder:"BUILD-ID" help:"GNU build ID of the executable the DWARF packages (.dwp) among the files belong to; by default that of the executable beside each package (X for X.dwp)."`
	// NoPackDWO turns off packing the .dwo files of -gsplit-dwarf builds.
	NoPackDWO bool   `name:"no-pack-dwo" help:"Do not pack the loose .dwo files of a -gsplit-dwarf build. By default, an executable or debug file whose skeleton units name .dwo files, uploaded without its DWARF package (no X.dwp beside X, none among the files), gets one made from the .dwo files where the compiler wrote them (or beside it), uploaded as its DWARF package under its GNU build ID: without it the server has line tables only, no functions or inlined frames."`
	DryRun    bool   `name:"dry-run" help:"Ask the server, upload nothing."`
	Name      string `help:"Name of the binary the files are builds of, for the server's retention (which keeps the last builds of each name); default: each file's name without .debug or .dbg (none for files named by build ID under .build-id/)."`
	Retries   uint   `default:"5" help:"Attempts per step for transient failures."`
	Progress  string `default:"auto" enum:"auto,bar,plain" help:"Progress output: a bar on a terminal, plain lines otherwise."`

	// Out receives the summary lines (stdout when nil); Err progress (stderr when nil).
	Out, Err   io.Writer    `kong:"-"`
	HTTPClient *http.Client `kong:"-"`

	ids keylock.Map
}

// Result is the outcome for one file.
type Result struct {
	Path    string
	BuildID string
	Outcome string // uploaded, skipped, would-upload, failed
	Detail  string
	Err     error
}

type candidate struct {
	path   string
	size   int64
	sha    string
	id     string
	idType debuginfov1.BuildIDType
	typ    debuginfov1.DebuginfoType
}

// nameOf is the binary name sent with the file at path.
func (u *UploadCmd) nameOf(path string) string {
	if u.Name != "" {
		return u.Name
	}
	if filepath.Base(filepath.Dir(filepath.Dir(path))) == ".build-id" {
		return ""
	}
	name := filepath.Base(path)
	for _, ext := range []string{".debug", ".dbg"} {
		name = strings.TrimSuffix(name, ext)
	}
	// The server takes 255 bytes of UTF-8 without control characters.
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	for len(name) > 255 {
		_, n := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-n]
	}
	return name
}

// Run uploads and prints one line per file; it fails when any file failed.
func (u *UploadCmd) Run() error {
	results, err := u.Upload(context.Background())
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d files failed", failed, len(results))
	}
	return nil
}

// Upload runs the upload and returns the per-file results.
func (u *UploadCmd) Upload(ctx context.Context) ([]Result, error) {
	out, errw := u.Out, u.Err
	if out == nil {
		out = os.Stdout
	}
	if errw == nil {
		errw = os.Stderr
	}
	hc := u.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	client, err := u.client(hc)
	if err != nil {
		return nil, err
	}
	files, err := collect(u.Paths)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("no ELF files found")
	}
	var bar *progressbar.ProgressBar
	useBar := u.Progress == "bar" || (u.Progress == "auto" && isTerminal(errw))
	if useBar {
		var total int64
		for _, f := range files {
			if st, err := os.Stat(f.path); err == nil {
				total += st.Size()
			}
		}
		bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(errw), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription("uploading"), progressbar.OptionThrottle(100*time.Millisecond))
	}
	results := make([][]Result, len(files))
	packs := u.newPackSet(files)
	var mu sync.Mutex
	sem := make(chan struct{}, max(u.Parallel, 1))
	var wg sync.WaitGroup
	for _, group := range groupByID(files) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for _, i := range group {
				f := files[i]
				rs := []Result{u.one(ctx, client, f, bar)}
				lines := []string{fmt.Sprintf("%s: %s", f.path, rs[0].Outcome)}
				if pr, notes := u.packDWO(ctx, client, f, rs[0], packs, bar); pr != nil {
					rs = append(rs, *pr)
					lines = append(append(lines, notes...), fmt.Sprintf("%s: %s", pr.Path, pr.Outcome))
				}
				mu.Lock()
				results[i] = rs
				if !useBar {
					for _, l := range lines {
						fmt.Fprintln(errw, l)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if bar != nil {
		// The bar only draws on the terminal: a failed draw must not fail the uploads.
		_ = bar.Finish()
		fmt.Fprintln(errw)
	}
	var flat []Result
	for _, rs := range results {
		flat = append(flat, rs...)
	}
	for _, r := range flat {
		line := fmt.Sprintf("%-8s %s %s", r.Outcome, r.Path, r.BuildID)
		if r.Err != nil {
			line += ": " + r.Err.Error()
		} else if r.Detail != "" {
			line += " (" + r.Detail + ")"
		}
		fmt.Fprintln(out, line)
	}
	return flat, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

type fileRef struct {
	path     string
	explicit bool
}

// collect expands directories into the ELF files they hold.
func collect(paths []string) ([]fileRef, error) {
	var out []fileRef
	seen := map[string]bool{}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("upload %s: %w", p, err)
		}
		if !st.IsDir() {
			if !seen[p] {
				out = append(out, fileRef{p, true})
				seen[p] = true
			}
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.Type().IsRegular() || seen[path] {
				return nil
			}
			if isELF(path) {
				out = append(out, fileRef{path, false})
				seen[path] = true
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("walk %s: %w", p, err)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

// groupByID gathers the files that carry the same build ID (an executable and its debug
// file, found together in a build directory) into one group, sent one after the other with
// the files that hold DWARF first: the store then has the whole debuginfo from the first
// upload on, and the stripped executable that follows adds nothing or only a companion. Sent
// the other way round, lookups would be answered from the executable's symbol table alone
// until the debug file was verified. Groups keep the order of their first file; a file whose
// build ID cannot be read quickly (no note, not ELF) is a group of its own and fails or
// succeeds later as before. The result holds indexes into files.
func groupByID(files []fileRef) [][]int {
	type info struct {
		id    string
		dwarf bool
	}
	infos := make([]info, len(files))
	for i, f := range files {
		ef, closer, err := elfx.OpenPath(f.path, elfx.Limits{})
		if err != nil {
			continue
		}
		gnu, goID := buildid.FromELF(ef)
		infos[i] = info{id: cmp.Or(gnu, goID), dwarf: ef.HasDWARF()}
		// Only read from: a failing close loses nothing.
		_ = closer.Close()
	}
	var groups [][]int
	at := map[string]int{}
	for i, in := range infos {
		if in.id == "" {
			groups = append(groups, []int{i})
			continue
		}
		g, ok := at[in.id]
		if !ok {
			g = len(groups)
			at[in.id] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	for _, g := range groups {
		sort.SliceStable(g, func(a, b int) bool { return infos[g[a]].dwarf && !infos[g[b]].dwarf })
	}
	return groups
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var m [4]byte
	_, err = io.ReadFull(f, m[:])
	return err == nil && string(m[:]) == "\x7fELF"
}

func (u *UploadCmd) describe(ref fileRef) (*candidate, error) {
	ef, closer, err := elfx.OpenPath(ref.path, elfx.Limits{})
	if err != nil {
		return nil, fmt.Errorf("not a readable ELF file: %w", err)
	}
	// Only read from: a failing close loses nothing.
	defer func() { _ = closer.Close() }()
	ids, err := buildid.Compute(ef.ReaderAt(), ef.Size())
	if err != nil {
		return nil, err
	}
	c := &candidate{path: ref.path, size: ef.Size()}
	if ef.Section(".debug_info.dwo") != nil && ef.Section(".debug_cu_index") == nil {
		// No build ID names a .dwo: alone, the store could not tell whose it is.
		c.typ = splitObject
		return c, nil
	}
	// Companion files are stored under the ID that names them, not their own IDs.
	if ef.Section(".debug_cu_index") != nil {
		id, err := u.packageOf(ref.path)
		if err != nil {
			return nil, err
		}
		c.id, c.idType, c.typ = id, debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE
		return c, u.hash(c)
	}
	if supID, ok, err := debuginfo.SupplementaryFileID(ref.path, elfx.Limits{}); err == nil && ok {
		c.id, c.idType, c.typ = supID, debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY
		return c, u.hash(c)
	}
	switch {
	case ids.GNU != "":
		c.id, c.idType = ids.GNU, debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU
	case ids.Go != "":
		c.id, c.idType = ids.Go, debuginfov1.BuildIDType_BUILD_ID_TYPE_GO
	default:
		c.id, c.idType = ids.HTLHash, debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH
	}
	switch u.Type {
	case "debuginfo":
		c.typ = debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO
	case "executable":
		c.typ = debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE
	default:
		c.typ = debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE
		if ef.HasDWARF() {
			c.typ = debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO
		}
	}
	return c, u.hash(c)
}

func (u *UploadCmd) hash(c *candidate) error {
	f, err := os.Open(c.path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hash: %w", err)
	}
	c.sha = hex.EncodeToString(h.Sum(nil))
	return nil
}

// packageOf returns the GNU build ID a DWARF package is stored under: --package-of, else
// that of the executable beside it (dwp -e X -o X.dwp, where llvm-symbolizer looks).
func (u *UploadCmd) packageOf(path string) (string, error) {
	if u.PackageOf != "" {
		if !binaryid.ValidGNU(u.PackageOf) {
			return "", fmt.Errorf("--package-of %q: not a GNU build ID (lower-case hex)", u.PackageOf)
		}
		return u.PackageOf, nil
	}
	exe := strings.TrimSuffix(path, ".dwp")
	if exe == path {
		return "", errors.New("a DWARF package carries no build ID: name it after its executable (X.dwp beside X) or pass --package-of BUILD-ID")
	}
	ids, err := buildid.FromFile(exe)
	if err != nil {
		return "", fmt.Errorf("a DWARF package is stored under its executable's build ID, and %s cannot be read: %w (or pass --package-of BUILD-ID)", exe, err)
	}
	if ids.GNU == "" {
		return "", fmt.Errorf("a DWARF package is stored under its executable's GNU build ID, and %s has none", exe)
	}
	return ids.GNU, nil
}

func (u *UploadCmd) source() debuginfov1.UploadSource {
	switch u.Source {
	case "node":
		return debuginfov1.UploadSource_UPLOAD_SOURCE_NODE
	case "debuginfod":
		return debuginfov1.UploadSource_UPLOAD_SOURCE_DEBUGINFOD
	}
	return debuginfov1.UploadSource_UPLOAD_SOURCE_CI
}

func (u *UploadCmd) one(ctx context.Context, client *uploadclient.Client, ref fileRef, bar *progressbar.ProgressBar) Result {
	res := Result{Path: ref.path}
	c, err := u.describe(ref)
	if err != nil {
		res.Outcome, res.Err = "failed", err
		return res
	}
	if c.typ == splitObject {
		res.Outcome, res.Detail = "skipped", "a split DWARF object (.dwo): the store takes it packed into its executable's DWARF package"
		progress(bar, c.size)
		return res
	}
	return u.send(ctx, client, c, res, bar)
}

// send uploads the file c describes, unless the server has it, filling res.
func (u *UploadCmd) send(ctx context.Context, client *uploadclient.Client, c *candidate, res Result, bar *progressbar.ProgressBar) Result {
	res.BuildID = c.id
	// The store takes one upload per build ID at a time and refuses a second file while one
	// is open: an executable and its debug file (and the package made for them), found
	// together in a build directory, go one after the other.
	unlock := u.ids.Lock(c.id)
	defer unlock()
	file := uploadclient.File{BuildID: c.id, BuildIDType: c.idType, Type: c.typ, SHA256: c.sha, Size: c.size, Source: u.source(), Name: u.nameOf(c.path)}
	should, err := uploadclient.Retry(ctx, u.Retries, func() (*debuginfov1.ShouldUploadResponse, error) {
		return client.ShouldUpload(ctx, file)
	})
	if err != nil {
		res.Outcome, res.Err = "failed", fmt.Errorf("ShouldUpload: %w", err)
		return res
	}
	reason := should.GetReason()
	res.Detail = strings.TrimPrefix(reason.String(), "SHOULD_UPLOAD_REASON_")
	// An upload in progress may be this client's own, cut off earlier: InitiateUpload hands
	// back the same upload for the same file, and refuses a different one.
	if !should.GetShouldUpload() && reason != debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_UPLOAD_IN_PROGRESS {
		res.Outcome = "skipped"
		if reason == debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_TOO_LARGE {
			res.Outcome, res.Err = "failed", errors.New(should.GetMessage())
		}
		progress(bar, c.size)
		return res
	}
	if u.DryRun {
		res.Outcome = "would-upload"
		progress(bar, c.size)
		return res
	}
	init, err := uploadclient.Retry(ctx, u.Retries, func() (*debuginfov1.InitiateUploadResponse, error) {
		return client.InitiateUpload(ctx, file)
	})
	if err != nil {
		if code := connect.CodeOf(err); code == connect.CodeAlreadyExists {
			res.Outcome, res.Detail = "skipped", err.Error()
			return res
		}
		res.Outcome, res.Err = "failed", fmt.Errorf("InitiateUpload: %w", err)
		return res
	}
	_, err = uploadclient.Retry(ctx, u.Retries, func() (struct{}, error) {
		return struct{}{}, put(ctx, client, init, c, bar)
	})
	var he *uploadclient.StatusError
	// 404: the upload is no longer open, which happens when another client sending the same
	// file (InitiateUpload handed both the same upload) finished it first. FinishUpload
	// then returns the stored record, or NOT_FOUND if the upload really is gone.
	gone := errors.As(err, &he) && he.Status == http.StatusNotFound
	if err != nil && !gone {
		res.Outcome, res.Err = "failed", err
		return res
	}
	fin, err := uploadclient.Retry(ctx, u.Retries, func() (*debuginfov1.FinishUploadResponse, error) {
		return client.FinishUpload(ctx, c.id, init.GetUploadId())
	})
	if err != nil {
		res.Outcome, res.Err = "failed", fmt.Errorf("FinishUpload: %w", err)
		if gone {
			// The PUT's answer is what went wrong first; say it too.
			res.Err = fmt.Errorf("%w (after the upload PUT answered %s)", res.Err, he.Error())
		}
		return res
	}
	q := fin.GetDebuginfo().GetQuality()
	res.Outcome = "uploaded"
	res.Detail = fmt.Sprintf("%s, %d bytes, dwarf=%v inlines=%v", res.Detail, c.size, q.GetHasDwarf(), q.GetHasInlineInfo())
	return res
}

// put sends c's bytes, moving bar as they go and back when the attempt fails.
func put(ctx context.Context, client *uploadclient.Client, init *debuginfov1.InitiateUploadResponse, c *candidate, bar *progressbar.ProgressBar) error {
	f, err := os.Open(c.path)
	if err != nil {
		return backoff.Permanent(err)
	}
	defer f.Close()
	var body io.Reader = f
	counted := int64(0)
	if bar != nil {
		body = io.TeeReader(f, writerFunc(func(p []byte) (int, error) {
			counted += int64(len(p))
			progress(bar, int64(len(p)))
			return len(p), nil
		}))
	}
	if err := client.Put(ctx, init, body, c.size); err != nil {
		progress(bar, -counted)
		return err
	}
	return nil
}

// progress moves bar by n bytes; bar is nil when no bar is drawn. The bar only draws on the
// terminal: a failed draw must not fail an upload.
func progress(bar *progressbar.ProgressBar, n int64) {
	if bar != nil {
		_ = bar.Add64(n)
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }
