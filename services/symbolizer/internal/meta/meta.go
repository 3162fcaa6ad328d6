package meta

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// File is one verified file of a record.
type File struct {
	UploadID   string                     `json:"upload_id"`
	BuildID    ID                         `json:"build_id"` // the ID it was uploaded under
	IDs        buildid.IDs                `json:"ids"`
	Type       debuginfov1.DebuginfoType  `json:"type"`
	Source     debuginfov1.UploadSource   `json:"source"`
	State      debuginfov1.DebuginfoState `json:"state"`
	Message    string                     `json:"message,omitempty"`
	Quality    Quality                    `json:"quality"`
	SHA256     string                     `json:"sha256"`
	Size       uint64                     `json:"size"`
	UploadedAt time.Time                  `json:"uploaded_at"`
	Object     string                     `json:"object"`
	Loads      []addrmap.Load             `json:"loads"`
	Runnable   bool                       `json:"runnable"`
	// Fidelity is what the file's index reached when it was verified.
	Fidelity index.Fidelity `json:"fidelity"`
}

// IndexObject is where the file's serialized index is stored.
func (f *File) IndexObject() string { return f.Object + ".index" }

// StringsObject is where the string table of the file's index is stored on its own: a
// replica reads results cached as string IDs with it, without loading the whole index.
func (f *File) StringsObject() string { return f.Object + ".strings" }

// StoreIndex stores ix, built from f, and its string table. A failure is logged, not
// returned: the index can always be built again from the file.
func (m *Meta) StoreIndex(ctx context.Context, f *File, ix *index.Index) {
	blob, err := ix.MarshalBinary()
	if err == nil {
		err = m.s.Put(ctx, f.IndexObject(), bytes.NewReader(blob), int64(len(blob)))
	}
	if err != nil {
		m.opt.Logger.Warn("store index", "object", f.IndexObject(), "err", err)
	}
	m.StoreStrings(ctx, f, ix)
}

// StoreStrings stores the string table of ix, built from f; a failure is logged.
func (m *Meta) StoreStrings(ctx context.Context, f *File, ix *index.Index) {
	blob := ix.MarshalStrings()
	if err := m.s.Put(ctx, f.StringsObject(), bytes.NewReader(blob), int64(len(blob))); err != nil {
		m.opt.Logger.Warn("store string table", "object", f.StringsObject(), "err", err)
	}
}

// Upload is a reserved, unfinished upload.
type Upload struct {
	ID        string                    `json:"id"`
	BuildID   ID                        `json:"build_id"`
	SHA256    string                    `json:"sha256"`
	Size      uint64                    `json:"size"`
	Type      debuginfov1.DebuginfoType `json:"type"`
	Source    debuginfov1.UploadSource  `json:"source"`
	ExpiresAt time.Time                 `json:"expires_at"`
}

// Object is where the upload's bytes are PUT.
func (u *Upload) Object() string { return "uploads/" + u.ID }

// Exec is what a record keeps of an executable of its binary while its file is a separate
// debug file: the program headers, which place addresses that come with a mapping, and the
// IDs, which name the binary as profilers on the node see it (the executable's htlhash is not
// the debug file's).
type Exec struct {
	SHA256 string                   `json:"sha256"`
	Source debuginfov1.UploadSource `json:"source"`
	IDs    buildid.IDs              `json:"ids"`
	Loads  []addrmap.Load           `json:"loads"`
}

func execOf(f *File) *Exec {
	return &Exec{SHA256: f.SHA256, Source: f.Source, IDs: f.IDs, Loads: f.Loads}
}

// Record is everything stored for one binary.
type Record struct {
	Key     string  `json:"key"`
	Current *File   `json:"current,omitempty"`
	Pending *Upload `json:"pending,omitempty"`
	// Exec is set while Current is not runnable and an executable of the binary was seen.
	Exec *Exec `json:"exec,omitempty"`
	// Aliases are the IDs whose alias object points at this record.
	Aliases []ID `json:"aliases,omitempty"`
}

// Loads returns the program headers that place addresses given with a mapping: the current
// file's when it is runnable, else those of an executable seen beside it. ok is false when
// only a separate debug file is known: objcopy --only-keep-debug (and so every distro debug
// package) keeps p_vaddr and p_memsz but rewrites p_offset and p_filesz, and normalizing
// with those puts addresses into other functions.
func (r *Record) Loads() (loads []addrmap.Load, ok bool) {
	if f := r.Current; f != nil && f.Runnable {
		return f.Loads, true
	}
	if r.Exec != nil {
		return r.Exec.Loads, true
	}
	return nil, false
}

// ids returns every ID the record answers to: its file's, and its executable's.
func (r *Record) ids() []ID {
	f := r.Current
	ids := append([]ID{f.BuildID}, IDsOf(f.IDs)...)
	if r.Exec != nil {
		for _, id := range IDsOf(r.Exec.IDs) {
			if !containsID(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// Proto renders the record for the API; nil when there is nothing to show.
func (r *Record) Proto() *debuginfov1.Debuginfo {
	if f := r.Current; f != nil {
		_, headers := r.Loads()
		d := &debuginfov1.Debuginfo{
			BuildId: f.BuildID.ID, BuildIdType: f.BuildID.Type, Type: f.Type, Source: f.Source,
			State: f.State, Quality: f.Quality.Proto(), Sha256: f.SHA256, Size: f.Size,
			UploadedAt: timestamppb.New(f.UploadedAt), HasProgramHeaders: headers,
		}
		for _, id := range r.ids()[1:] {
			d.Ids = append(d.Ids, &debuginfov1.BinaryID{Type: id.Type, Id: id.ID})
		}
		return d
	}
	if u := r.Pending; u != nil {
		return &debuginfov1.Debuginfo{
			BuildId: u.BuildID.ID, BuildIdType: u.BuildID.Type, Type: u.Type, Source: u.Source,
			State: debuginfov1.DebuginfoState_DEBUGINFO_STATE_UPLOADING, Sha256: u.SHA256, Size: u.Size,
		}
	}
	return nil
}

// Desc describes a file a client wants to upload.
type Desc struct {
	BuildID ID
	Type    debuginfov1.DebuginfoType
	SHA256  string
	Size    uint64
	Source  debuginfov1.UploadSource
}

// Decision is a ShouldUpload answer.
type Decision struct {
	Upload  bool
	Reason  debuginfov1.ShouldUploadReason
	Message string
}

// DecisionError is returned by Initiate when the decision is not to upload.
type DecisionError struct{ Decision }

func (e *DecisionError) Error() string { return e.Message }

// Errors callers map to API codes.
var (
	ErrNotFound     = errors.New("not found")
	ErrNotUploaded  = errors.New("no object was uploaded yet")
	ErrVerification = errors.New("verification failed")
)

// Options configures Meta.
type Options struct {
	MaxSize   uint64
	UploadTTL time.Duration
	TempDir   string
	Limits    elfx.Limits
	Logger    *slog.Logger
	Now       func() time.Time
	// OnIndex receives the index built while verifying a file, so the caller can keep it
	// in memory; the serialized index is stored by Meta.
	OnIndex func(f *File, ins *Inspection)
}

// Meta manages records. Changes to one record are serialized by an in-process lock per
// record key; replicas sharing one bucket rely on upload IDs and verified content, not on
// locks, to stay correct.
type Meta struct {
	s    store.Store
	opt  Options
	mu   sync.Mutex
	lock map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// New returns a Meta over s.
func New(s store.Store, opt Options) *Meta {
	if opt.UploadTTL == 0 {
		opt.UploadTTL = 15 * time.Minute
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	return &Meta{s: s, opt: opt, lock: map[string]*keyLock{}}
}

// Store returns the underlying object store.
func (m *Meta) Store() store.Store { return m.s }

// MaxSize returns the upload size cap.
func (m *Meta) MaxSize() uint64 { return m.opt.MaxSize }

func (m *Meta) locked(key string) func() {
	m.mu.Lock()
	l := m.lock[key]
	if l == nil {
		l = &keyLock{}
		m.lock[key] = l
	}
	l.refs++
	m.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.lock, key)
		}
		m.mu.Unlock()
	}
}

func recordKey(id ID) string { return "records/" + id.pathPart() }
func aliasKey(id ID) string  { return "ids/" + id.pathPart() }

type alias struct {
	Record string `json:"record"`
}

func (m *Meta) readJSON(ctx context.Context, key string, v any) error {
	rc, size, err := m.s.Open(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size > 16<<20 {
		return fmt.Errorf("%s: record of %d bytes is implausibly large", key, size)
	}
	data, err := io.ReadAll(io.LimitReader(rc, size))
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %s: %w", key, err)
	}
	return nil
}

func (m *Meta) writeJSON(ctx context.Context, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return m.s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
}

// recordKeyFor returns the record an ID resolves to, or the key a new record for it gets.
func (m *Meta) recordKeyFor(ctx context.Context, id ID) (key string, exists bool, err error) {
	var a alias
	err = m.readJSON(ctx, aliasKey(id), &a)
	switch {
	case err == nil:
		if !strings.HasPrefix(a.Record, "records/") || store.CheckKey(a.Record) != nil {
			return "", false, fmt.Errorf("alias of %s names %q, not a record", id, a.Record)
		}
		return a.Record, true, nil
	case errors.Is(err, store.ErrNotExist):
		return recordKey(id), false, nil
	}
	return "", false, err
}

func (m *Meta) loadRecord(ctx context.Context, key string) (*Record, error) {
	var r Record
	if err := m.readJSON(ctx, key+"/record.json", &r); err != nil {
		if errors.Is(err, store.ErrNotExist) {
			return &Record{Key: key}, nil
		}
		return nil, err
	}
	r.Key = key
	return &r, nil
}

// Resolve returns the record holding an available or invalid file under id, or ErrNotFound.
func (m *Meta) Resolve(ctx context.Context, id ID) (*Record, error) {
	key, exists, err := m.recordKeyFor(ctx, id)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	r, err := m.loadRecord(ctx, key)
	if err != nil {
		return nil, err
	}
	if r.Current == nil {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	return r, nil
}

// rank orders files of the same binary: debuginfo over executable, then CI over debuginfod
// over node.
func rank(t debuginfov1.DebuginfoType, s debuginfov1.UploadSource) int {
	r := 0
	if t == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO {
		r = 10
	}
	switch s {
	case debuginfov1.UploadSource_UPLOAD_SOURCE_CI:
		r += 3
	case debuginfov1.UploadSource_UPLOAD_SOURCE_DEBUGINFOD:
		r += 2
	case debuginfov1.UploadSource_UPLOAD_SOURCE_NODE:
		r++
	}
	return r
}

func (m *Meta) decide(r *Record, d Desc, now time.Time) Decision {
	if m.opt.MaxSize > 0 && d.Size > m.opt.MaxSize {
		return Decision{false, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_TOO_LARGE,
			fmt.Sprintf("size %d is over the server's cap of %d bytes", d.Size, m.opt.MaxSize)}
	}
	cur := r.Current
	if cur != nil && cur.SHA256 == d.SHA256 && cur.State == debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE {
		return Decision{false, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_ALREADY_STORED,
			fmt.Sprintf("the same file (%s, %s) is stored", cur.Type, cur.Source)}
	}
	if p := r.Pending; p != nil && now.Before(p.ExpiresAt) {
		return Decision{false, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_UPLOAD_IN_PROGRESS,
			fmt.Sprintf("an upload (%s, %s) is in progress until %s", p.Type, p.Source, p.ExpiresAt.UTC().Format(time.RFC3339))}
	}
	if cur != nil {
		if cur.State == debuginfov1.DebuginfoState_DEBUGINFO_STATE_INVALID {
			return Decision{true, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_REPLACES_WORSE, "the stored file is invalid: " + cur.Message}
		}
		// A file whose DWARF does not read ranks below any file whose DWARF does: debuginfo
		// replaces it, whatever its source.
		if cur.Quality.DWARFError != "" && d.Type == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO {
			return Decision{true, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_REPLACES_WORSE,
				"the stored file's DWARF is unreadable: " + cur.Quality.DWARFError}
		}
		if rank(d.Type, d.Source) > rank(cur.Type, cur.Source) {
			return Decision{true, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_REPLACES_WORSE,
				fmt.Sprintf("replaces the stored %s from %s", cur.Type, cur.Source)}
		}
		if d.Type == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE {
			if _, ok := r.Loads(); !ok {
				return Decision{true, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_EXECUTABLE_NEEDED,
					"only a separate debug file is stored: the executable's program headers are needed to place mapped addresses"}
			}
		}
		return Decision{false, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_BETTER_STORED,
			fmt.Sprintf("a file at least as good (%s from %s) is stored", cur.Type, cur.Source)}
	}
	if r.Pending != nil {
		return Decision{true, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_PREVIOUS_UPLOAD_STALE, "the previous upload expired unfinished"}
	}
	return Decision{true, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_FIRST, "nothing is stored under this build ID"}
}

// ShouldUpload decides without changing anything.
func (m *Meta) ShouldUpload(ctx context.Context, d Desc) (Decision, error) {
	key, _, err := m.recordKeyFor(ctx, d.BuildID)
	if err != nil {
		return Decision{}, err
	}
	r, err := m.loadRecord(ctx, key)
	if err != nil {
		return Decision{}, err
	}
	return m.decide(r, d, m.opt.Now()), nil
}

// Initiate reserves an upload, or hands back the live upload of the same file.
func (m *Meta) Initiate(ctx context.Context, d Desc) (*Upload, error) {
	key, _, err := m.recordKeyFor(ctx, d.BuildID)
	if err != nil {
		return nil, err
	}
	defer m.locked(key)()
	r, err := m.loadRecord(ctx, key)
	if err != nil {
		return nil, err
	}
	now := m.opt.Now()
	if p := r.Pending; p != nil && now.Before(p.ExpiresAt) && p.SHA256 == d.SHA256 && p.Size == d.Size && p.BuildID == d.BuildID {
		return p, nil
	}
	dec := m.decide(r, d, now)
	if !dec.Upload {
		return nil, &DecisionError{dec}
	}
	if r.Pending != nil {
		// A stale upload: its bytes, if any, are reclaimed.
		if err := m.s.Delete(ctx, r.Pending.Object()); err != nil {
			return nil, err
		}
	}
	var rnd [16]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("upload id: %w", err)
	}
	r.Pending = &Upload{
		ID: hex.EncodeToString(rnd[:]), BuildID: d.BuildID, SHA256: d.SHA256, Size: d.Size,
		Type: d.Type, Source: d.Source, ExpiresAt: now.Add(m.opt.UploadTTL).UTC(),
	}
	if err := m.saveRecord(ctx, r); err != nil {
		return nil, err
	}
	if err := m.writeJSON(ctx, "uploads-index/"+r.Pending.ID, alias{Record: key}); err != nil {
		return nil, err
	}
	return r.Pending, nil
}

func (m *Meta) saveRecord(ctx context.Context, r *Record) error {
	return m.writeJSON(ctx, r.Key+"/record.json", r)
}

// saveOrDrop saves r, or removes it when it holds nothing: a rejected or abandoned first
// upload leaves no record behind.
func (m *Meta) saveOrDrop(ctx context.Context, r *Record) error {
	if r.Current == nil && r.Pending == nil && r.Exec == nil && len(r.Aliases) == 0 {
		return m.s.Delete(ctx, r.Key+"/record.json")
	}
	return m.saveRecord(ctx, r)
}

// HidePath rewrites err's message so that it names the stored object instead of the local
// path it was read from (a copy in the server's temporary or store directory): errors reach
// clients, the server's file system does not. errors.Is and As still see err.
func HidePath(err error, path, object string) error {
	if err == nil || path == "" {
		return err
	}
	return &hiddenPath{err: err, path: path, object: object}
}

type hiddenPath struct {
	err          error
	path, object string
}

func (h *hiddenPath) Error() string { return strings.ReplaceAll(h.err.Error(), h.path, h.object) }
func (h *hiddenPath) Unwrap() error { return h.err }

// PendingUpload finds the live upload with this ID, for the raw PUT endpoint.
func (m *Meta) PendingUpload(ctx context.Context, uploadID string) (*Upload, error) {
	if !validUploadID(uploadID) {
		return nil, fmt.Errorf("upload %q: %w", uploadID, ErrNotFound)
	}
	var a alias
	if err := m.readJSON(ctx, "uploads-index/"+uploadID, &a); err != nil {
		if errors.Is(err, store.ErrNotExist) {
			return nil, fmt.Errorf("upload %s: %w", uploadID, ErrNotFound)
		}
		return nil, err
	}
	r, err := m.loadRecord(ctx, a.Record)
	if err != nil {
		return nil, err
	}
	if r.Pending == nil || r.Pending.ID != uploadID || !m.opt.Now().Before(r.Pending.ExpiresAt) {
		return nil, fmt.Errorf("upload %s: %w", uploadID, ErrNotFound)
	}
	return r.Pending, nil
}

func validUploadID(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// Finish verifies an upload and makes it the record's file.
func (m *Meta) Finish(ctx context.Context, id ID, uploadID string) (*Record, error) {
	key, _, err := m.recordKeyFor(ctx, id)
	if err != nil {
		return nil, err
	}
	unlock := m.locked(key)
	defer unlock()
	r, err := m.loadRecord(ctx, key)
	if err != nil {
		return nil, err
	}
	if r.Current != nil && r.Current.UploadID == uploadID && r.Current.BuildID == id {
		return r, nil // a repeated FinishUpload
	}
	p := r.Pending
	if p == nil || p.ID != uploadID || p.BuildID != id {
		return nil, fmt.Errorf("upload %s of %s: %w", uploadID, id, ErrNotFound)
	}
	now := m.opt.Now()
	if !now.Before(p.ExpiresAt) {
		return nil, fmt.Errorf("upload %s expired at %s: %w", uploadID, p.ExpiresAt.Format(time.RFC3339), ErrNotFound)
	}
	size, err := m.s.Size(ctx, p.Object())
	if errors.Is(err, store.ErrNotExist) {
		return nil, fmt.Errorf("upload %s: %w", uploadID, ErrNotUploaded)
	}
	if err != nil {
		return nil, err
	}
	file, ins, verr := m.verify(ctx, p, uint64(size))
	if verr != nil {
		// The bytes are wrong: delete them and end the upload; the client starts again.
		r.Pending = nil
		err := errors.Join(m.s.Delete(ctx, p.Object()), m.s.Delete(ctx, "uploads-index/"+p.ID), m.saveOrDrop(ctx, r))
		if err != nil {
			return nil, fmt.Errorf("clear failed upload: %w (after: %w)", err, verr)
		}
		return nil, fmt.Errorf("%w: %w", ErrVerification, verr)
	}
	old := r.Current
	if old != nil && old.State == debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE && !old.Runnable && file.Runnable &&
		rank(file.Type, file.Source) <= rank(old.Type, old.Source) {
		// An executable beside a stored debug file (SHOULD_UPLOAD_REASON_EXECUTABLE_NEEDED):
		// the debug file stays the source of symbols; the executable lends its program
		// headers and IDs, and its bytes are not kept.
		r.Exec, r.Pending = execOf(file), nil
		if err := m.saveRecord(ctx, r); err != nil {
			return nil, err
		}
		if err := m.pointAliases(ctx, r); err != nil {
			return nil, err
		}
		m.deletePending(ctx, p)
		return r, nil
	}
	file.Object = r.Key + "/" + file.SHA256
	if err := m.s.Copy(ctx, p.Object(), file.Object); err != nil {
		return nil, err
	}
	if ins.Index != nil {
		m.StoreIndex(ctx, file, ins.Index)
	}
	switch {
	case file.Runnable:
		r.Exec = nil // the file's own program headers serve
	case old != nil && old.Runnable:
		r.Exec = execOf(old) // a debug file replaces the executable: keep what placed addresses
	}
	r.Current, r.Pending = file, nil
	// The record now names the new file: only then are aliases pointed at it and the old
	// file removed, so a reader never follows a record to a missing or unverified file.
	if err := m.saveRecord(ctx, r); err != nil {
		return nil, err
	}
	if err := m.pointAliases(ctx, r); err != nil {
		return nil, err
	}
	if old != nil && old.Object != file.Object {
		m.deleteFile(ctx, old)
	}
	m.deletePending(ctx, p)
	if m.opt.OnIndex != nil && ins.Index != nil {
		m.opt.OnIndex(file, ins)
	}
	return r, nil
}

// deletePending removes an upload's bytes and index entry once no record names them. A
// failure leaves garbage, not a wrong answer: it is logged and the sweep of abandoned uploads
// removes it later.
func (m *Meta) deletePending(ctx context.Context, p *Upload) {
	for _, k := range []string{p.Object(), "uploads-index/" + p.ID} {
		if err := m.s.Delete(ctx, k); err != nil {
			m.opt.Logger.Warn("delete finished upload", "object", k, "err", err)
		}
	}
}

func (m *Meta) deleteFile(ctx context.Context, f *File) {
	for _, k := range []string{f.Object, f.IndexObject(), f.StringsObject()} {
		if err := m.s.Delete(ctx, k); err != nil {
			m.opt.Logger.Warn("delete replaced file", "object", k, "err", err)
		}
	}
}

// pointAliases makes every ID of the record's file (and of its executable) resolve to it,
// unless the ID already resolves to another record holding a file at least as good.
func (m *Meta) pointAliases(ctx context.Context, r *Record) error {
	f := r.Current
	for _, id := range r.ids() {
		if containsID(r.Aliases, id) {
			continue
		}
		key, exists, err := m.recordKeyFor(ctx, id)
		if err != nil {
			return err
		}
		if exists && key != r.Key {
			other, err := m.loadRecord(ctx, key)
			if err != nil {
				return err
			}
			if o := other.Current; o != nil && o.State == debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE && rank(o.Type, o.Source) >= rank(f.Type, f.Source) {
				continue
			}
		}
		if err := m.writeJSON(ctx, aliasKey(id), alias{Record: r.Key}); err != nil {
			return err
		}
		r.Aliases = append(r.Aliases, id)
	}
	return m.saveRecord(ctx, r)
}

func containsID(ids []ID, id ID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func (m *Meta) verify(ctx context.Context, p *Upload, size uint64) (*File, *Inspection, error) {
	if size != p.Size {
		return nil, nil, fmt.Errorf("stored object has %d bytes, the upload declared %d", size, p.Size)
	}
	path, cleanup, err := store.LocalCopy(ctx, m.s, p.Object(), m.opt.TempDir)
	if err != nil {
		return nil, nil, err
	}
	defer cleanup()
	sum, err := fileSHA256(path)
	if err != nil {
		return nil, nil, HidePath(err, path, p.Object())
	}
	if sum != p.SHA256 {
		return nil, nil, fmt.Errorf("stored object has SHA-256 %s, the upload declared %s", sum, p.SHA256)
	}
	ins, err := Inspect(path, m.opt.Limits)
	if err != nil {
		return nil, nil, HidePath(err, path, p.Object())
	}
	if !containsID(IDsOf(ins.IDs), p.BuildID) {
		return nil, nil, fmt.Errorf("the file does not carry build ID %s (it has gnu=%q go=%q htlhash=%q)", p.BuildID, ins.IDs.GNU, ins.IDs.Go, ins.IDs.HTLHash)
	}
	return &File{
		UploadID: p.ID, BuildID: p.BuildID, IDs: ins.IDs, Type: p.Type, Source: p.Source,
		State: debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE, Quality: ins.Quality,
		SHA256: sum, Size: size, UploadedAt: m.opt.Now().UTC(), Loads: ins.Loads, Runnable: ins.Runnable,
		Fidelity: fidelityOf(ins),
	}, ins, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash upload: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash upload: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// MarkInvalid records that the stored file with this SHA-256 could not be used, so a new
// upload replaces it.
func (m *Meta) MarkInvalid(ctx context.Context, key, sha, msg string) error {
	defer m.locked(key)()
	r, err := m.loadRecord(ctx, key)
	if err != nil {
		return err
	}
	if r.Current == nil || r.Current.SHA256 != sha || r.Current.State == debuginfov1.DebuginfoState_DEBUGINFO_STATE_INVALID {
		return nil
	}
	r.Current.State, r.Current.Message = debuginfov1.DebuginfoState_DEBUGINFO_STATE_INVALID, msg
	return m.saveRecord(ctx, r)
}

// Delete removes the record an ID resolves to, its files and its aliases.
func (m *Meta) Delete(ctx context.Context, id ID) error {
	key, exists, err := m.recordKeyFor(ctx, id)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	defer m.locked(key)()
	r, err := m.loadRecord(ctx, key)
	if err != nil {
		return err
	}
	if r.Current == nil {
		return fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	for _, a := range r.Aliases {
		var cur alias
		if err := m.readJSON(ctx, aliasKey(a), &cur); err == nil && cur.Record == key {
			if err := m.s.Delete(ctx, aliasKey(a)); err != nil {
				return err
			}
		}
	}
	if p := r.Pending; p != nil {
		m.deletePending(ctx, p)
	}
	if err := m.s.Delete(ctx, key+"/record.json"); err != nil {
		return err
	}
	m.deleteFile(ctx, r.Current)
	return nil
}

// List returns a page of records ordered by build ID, and the next page token.
func (m *Meta) List(ctx context.Context, pageSize int, token string) ([]*debuginfov1.Debuginfo, string, error) {
	after := ""
	if token != "" {
		b, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil || !strings.HasPrefix(string(b), "psym1:") {
			return nil, "", fmt.Errorf("page token %q was not issued by this server", token)
		}
		after = strings.TrimPrefix(string(b), "psym1:")
	}
	keys, err := m.s.List(ctx, "records/")
	if err != nil {
		return nil, "", err
	}
	var all []*debuginfov1.Debuginfo
	for _, k := range keys {
		if !strings.HasSuffix(k, "/record.json") {
			continue
		}
		r, err := m.loadRecord(ctx, strings.TrimSuffix(k, "/record.json"))
		if err != nil {
			return nil, "", err
		}
		if d := r.Proto(); d != nil && d.BuildId > after {
			all = append(all, d)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].BuildId < all[j].BuildId })
	next := ""
	if len(all) > pageSize {
		all = all[:pageSize]
		next = base64.RawURLEncoding.EncodeToString([]byte("psym1:" + all[len(all)-1].BuildId))
	}
	return all, next, nil
}

func fidelityOf(ins *Inspection) index.Fidelity {
	if ins.Index == nil {
		return index.FidelityNone
	}
	return ins.Index.Fidelity()
}

// Ingest stores a local file as an upload would (Initiate, copy, Finish): used for files the
// server fetched itself from debuginfod. A file already stored or beaten by a stored one is
// not an error; the record under id is returned either way.
func (m *Meta) Ingest(ctx context.Context, id ID, path string, typ debuginfov1.DebuginfoType, source debuginfov1.UploadSource) (*Record, error) {
	sum, err := fileSHA256(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", id, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", id, err)
	}
	up, err := m.Initiate(ctx, Desc{BuildID: id, Type: typ, SHA256: sum, Size: uint64(st.Size()), Source: source})
	var de *DecisionError
	if errors.As(err, &de) && (de.Reason == debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_ALREADY_STORED || de.Reason == debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_BETTER_STORED) {
		return m.Resolve(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	if err := m.s.Put(ctx, up.Object(), f, st.Size()); err != nil {
		return nil, err
	}
	return m.Finish(ctx, id, up.ID)
}

// Sweep deletes upload bytes nobody can finish any more: those of expired or ended uploads,
// and objects a client PUT after its upload was finished by another client. It returns how
// many objects it removed.
func (m *Meta) Sweep(ctx context.Context) (int, error) {
	now := m.opt.Now()
	removed := 0
	live := map[string]bool{}
	idx, err := m.s.List(ctx, "uploads-index/")
	if err != nil {
		return 0, err
	}
	for _, k := range idx {
		id := strings.TrimPrefix(k, "uploads-index/")
		var a alias
		if err := m.readJSON(ctx, k, &a); err != nil {
			continue
		}
		r, err := m.loadRecord(ctx, a.Record)
		if err != nil {
			return removed, err
		}
		if p := r.Pending; p != nil && p.ID == id && now.Before(p.ExpiresAt) {
			live[id] = true
			continue
		}
		if err := errors.Join(m.s.Delete(ctx, "uploads/"+id), m.s.Delete(ctx, k)); err != nil {
			return removed, err
		}
		removed++
	}
	objs, err := m.s.List(ctx, "uploads/")
	if err != nil {
		return removed, err
	}
	for _, k := range objs {
		id := strings.TrimPrefix(k, "uploads/")
		if live[id] {
			continue
		}
		// Initiated after the index was listed: still live.
		if _, err := m.PendingUpload(ctx, id); err == nil {
			continue
		}
		if err := m.s.Delete(ctx, k); err != nil {
			return removed, err
		}
		removed++
	}
	return removed, nil
}
