package catalog

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/pkg/keylock"
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
	// Supplementary is the ID of the supplementary DWARF file the file's DWARF refers to,
	// and SkeletonUnits the count of its -gsplit-dwarf skeleton units: the companions its
	// index needs (see Companions).
	Supplementary string `json:"supplementary_id,omitempty"`
	SkeletonUnits int    `json:"skeleton_units,omitempty"`
	// PackageUnits is the count of split units of a DWARF package, and SupplementaryOf the
	// ID a supplementary file is named by (see debuginfo.SupplementaryFileID).
	PackageUnits    int    `json:"package_units,omitempty"`
	SupplementaryOf string `json:"supplementary_of,omitempty"`
	// QualityVariant names the companions Quality was found with (Companions.Variant): ""
	// for a file that needs none, and for records written before it was kept. Read with
	// other companions, the file has another quality (see QualityWith).
	QualityVariant string `json:"quality_variant,omitempty"`
	// Name is the binary's name as the uploader gave it ("" when none was given).
	Name string `json:"name,omitempty"`
}

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
	// Version is the format of the record (recordVersion when written; 0 in records written
	// before it was kept, which are of version 1).
	Version int     `json:"version,omitempty"`
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
			UploadedAt: timestamppb.New(f.UploadedAt), HasProgramHeaders: headers, Name: f.Name,
		}
		for _, id := range r.ids()[1:] {
			d.Ids = append(d.Ids, &debuginfov1.BinaryID{Type: id.Type, Id: id.ID})
		}
		return d
	}
	if u := r.Pending; u != nil {
		return &debuginfov1.Debuginfo{
			BuildId: u.BuildID.ID, BuildIdType: u.BuildID.Type, Type: u.Type, Source: u.Source,
			State: debuginfov1.DebuginfoState_DEBUGINFO_STATE_UPLOADING, Sha256: u.SHA256, Size: u.Size, Name: u.Name,
		}
	}
	return nil
}

// Errors callers map to API codes.
var (
	ErrNotFound     = errors.New("not found")
	ErrNotUploaded  = errors.New("no object was uploaded yet")
	ErrVerification = errors.New("verification failed")
)

// Options configures Catalog.
type Options struct {
	MaxSize   uint64
	UploadTTL time.Duration
	TempDir   string
	Limits    elfx.Limits
	Logger    *slog.Logger
	Now       func() time.Time
	// OnIndex receives the index built while verifying a file, so the caller can keep it
	// in memory; the serialized index is stored by Catalog.
	OnIndex func(f *File, ins *Inspection)
	// Locker, when set, locks a record across the replicas sharing the store, so that two
	// replicas do not both reserve an upload of one build ID.
	Locker Locker
	// InitiateWait is how long InitiateUpload waits for a record another replica is changing
	// before answering that an upload is in progress (default 2s).
	InitiateWait time.Duration
	// FinishWait is how long FinishUpload, Delete and MarkInvalid wait for such a record
	// (default 2m: another replica may be verifying a large file).
	FinishWait time.Duration
	// Annotate, when set, adds what others know of a record (its last use) to its API form
	// in Get, List and FinishUpload answers.
	Annotate func(ctx context.Context, r *Record, d *debuginfov1.Debuginfo)
}

// Locker locks a key across replicas. Lock returns ErrLocked when another replica held the
// key for the whole wait. A Locker that cannot reach its backend returns a no-op unlock and
// no error: coordination is lost for that while (and logged), correctness is not, since
// uploads are still matched by ID and verified content.
type Locker interface {
	Lock(ctx context.Context, key string, wait time.Duration) (unlock func(), err error)
}

// ErrLocked says another replica holds a record's lock.
var ErrLocked = errors.New("another replica is changing this record")

// Catalog manages records. Changes to one record are serialized by an in-process lock per
// record key and, with a Locker, by a lock shared with the other replicas; replicas rely on
// upload IDs and verified content, not on locks, to stay correct.
type Catalog struct {
	s    store.Store
	opt  Options
	lock keylock.Map
}

// New returns a Catalog over s.
func New(s store.Store, opt Options) *Catalog {
	if opt.UploadTTL == 0 {
		opt.UploadTTL = 15 * time.Minute
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.InitiateWait <= 0 {
		opt.InitiateWait = 2 * time.Second
	}
	if opt.FinishWait <= 0 {
		opt.FinishWait = 2 * time.Minute
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	return &Catalog{s: s, opt: opt}
}

// Store returns the underlying object store.
func (m *Catalog) Store() store.Store { return m.s }

// MaxSize returns the upload size cap.
func (m *Catalog) MaxSize() uint64 { return m.opt.MaxSize }

func (m *Catalog) locked(key string) func() { return m.lock.Lock(key) }

// lockedShared takes the record's in-process lock, then its lock across replicas.
func (m *Catalog) lockedShared(ctx context.Context, key string, wait time.Duration) (func(), error) {
	unlock := m.lock.Lock(key)
	if m.opt.Locker == nil {
		return unlock, nil
	}
	shared, err := m.opt.Locker.Lock(ctx, "record/"+key, wait)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return func() { shared(); unlock() }, nil
}

func recordKey(id ID) string { return "records/" + id.pathPart() }
func aliasKey(id ID) string  { return "ids/" + id.pathPart() }

type alias struct {
	Version int    `json:"version,omitempty"` // as Record.Version
	Record  string `json:"record"`
}

func newAlias(record string) alias { return alias{Version: recordVersion, Record: record} }

// recordVersion is the format of records (record.json), aliases and quality objects. Within
// a version fields are only ever added, never given another meaning: a release reads what it
// knows and ignores the rest, and a record without a version is of version 1. A release that
// changes what a field means raises it; a release meeting a record or alias of a version above
// its own refuses it (ErrNewerFormat) rather than misread it or write over it.
const recordVersion = 1

// ErrNewerFormat says an object was written by a later release in a format this one does not read.
var ErrNewerFormat = errors.New("written by a later release in a format this release does not read")

func checkVersion(key string, v int) error {
	if v > recordVersion {
		return fmt.Errorf("%s: format version %d, this release reads up to %d: %w", key, v, recordVersion, ErrNewerFormat)
	}
	return nil
}

// readJSON reads a JSON object. One replaced by another replica while it was read is read
// again: records change under concurrent uploads of one build ID.
func (m *Catalog) readJSON(ctx context.Context, key string, v any) error {
	var err error
	for range 5 {
		if err = m.readJSONOnce(ctx, key, v); !errors.Is(err, store.ErrChanged) {
			return err
		}
	}
	return err
}

func (m *Catalog) readJSONOnce(ctx context.Context, key string, v any) error {
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

func (m *Catalog) writeJSON(ctx context.Context, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return m.s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
}

// recordKeyFor returns the record an ID resolves to, or the key a new record for it gets.
func (m *Catalog) recordKeyFor(ctx context.Context, id ID) (key string, exists bool, err error) {
	var a alias
	err = m.readJSON(ctx, aliasKey(id), &a)
	if err == nil {
		err = checkVersion(aliasKey(id), a.Version)
	}
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

func (m *Catalog) loadRecord(ctx context.Context, key string) (*Record, error) {
	var r Record
	if err := m.readJSON(ctx, key+"/record.json", &r); err != nil {
		if errors.Is(err, store.ErrNotExist) {
			return &Record{Key: key}, nil
		}
		return nil, err
	}
	if err := checkVersion(key+"/record.json", r.Version); err != nil {
		return nil, err
	}
	r.Key = key
	return &r, nil
}

// Resolve returns the record holding an available or invalid file under id, or ErrNotFound.
func (m *Catalog) Resolve(ctx context.Context, id ID) (*Record, error) {
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

// Arriving reports whether debuginfo under id, which Resolve did not find, is on its way: an
// upload reserved under id and not expired (its bytes being sent, or verified), or a
// verified file whose IDs are being pointed at it. It costs one read of the store.
func (m *Catalog) Arriving(ctx context.Context, id ID) (bool, error) {
	r, err := m.loadRecord(ctx, recordKey(id))
	if err != nil {
		return false, err
	}
	if p := r.Pending; p != nil && m.opt.Now().Before(p.ExpiresAt) {
		return true, nil
	}
	return r.Current != nil, nil
}

func (m *Catalog) saveRecord(ctx context.Context, r *Record) error {
	r.Version = recordVersion
	return m.writeJSON(ctx, r.Key+"/record.json", r)
}

// saveOrDrop saves r, or removes it when it holds nothing: a rejected or abandoned first
// upload leaves no record behind.
func (m *Catalog) saveOrDrop(ctx context.Context, r *Record) error {
	if r.Current == nil && r.Pending == nil && r.Exec == nil && len(r.Aliases) == 0 {
		return m.s.Delete(ctx, r.Key+"/record.json")
	}
	return m.saveRecord(ctx, r)
}

// deletePending removes an upload's bytes and index entry once no record names them. A
// failure leaves garbage, not a wrong answer: it is logged and the sweep of abandoned uploads
// removes it later.
func (m *Catalog) deletePending(ctx context.Context, p *Upload) {
	for _, k := range []string{p.Object(), "uploads-index/" + p.ID} {
		if err := m.s.Delete(ctx, k); err != nil {
			m.opt.Logger.Warn("delete finished upload", "object", k, "err", err)
		}
	}
}

// The file goes first: a lookup that read the record before it was deleted then finds no file
// to build an index from, so it cannot store an index that nothing names any more (see
// docs/design/0010-retention.md).
func (m *Catalog) deleteFile(ctx context.Context, f *File) {
	keys := []string{f.Object, f.IndexObject(), f.StringsObject()}
	// Indexes built with companions are stored under variants of the file's key.
	if more, err := m.s.List(ctx, f.Object+"."); err == nil {
		for _, k := range more {
			if !containsKey(keys, k) {
				keys = append(keys, k)
			}
		}
	} else {
		m.opt.Logger.Warn("list index variants", "object", f.Object, "err", err)
	}
	for _, k := range keys {
		if err := m.s.Delete(ctx, k); err != nil {
			m.opt.Logger.Warn("delete replaced file", "object", k, "err", err)
		}
	}
}

// pointAliases makes every ID of the record's file (and of its executable) resolve to it,
// unless the ID already resolves to another record holding a file at least as good.
func (m *Catalog) pointAliases(ctx context.Context, r *Record) error {
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
		if err := m.writeJSON(ctx, aliasKey(id), newAlias(r.Key)); err != nil {
			return err
		}
		r.Aliases = append(r.Aliases, id)
	}
	return m.saveRecord(ctx, r)
}

func containsKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

func containsID(ids []ID, id ID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// Delete removes the record an ID resolves to, its files and its aliases.
func (m *Catalog) Delete(ctx context.Context, id ID) error {
	key, exists, err := m.recordKeyFor(ctx, id)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	unlock, err := m.lockedShared(ctx, key, m.opt.FinishWait)
	if err != nil {
		return err
	}
	defer unlock()
	r, err := m.loadRecord(ctx, key)
	if err != nil {
		return err
	}
	if r.Current == nil {
		return fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	return m.deleteLocked(ctx, r)
}

// deleteLocked removes record r, whose lock the caller holds: its aliases first, so that from
// then on every ID of it resolves to nothing, then the record, then its files, and the
// binary's DWARF package.
func (m *Catalog) deleteLocked(ctx context.Context, r *Record) error {
	key := r.Key
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
	// The binary's DWARF package goes with it: it completes nothing else.
	if gnu := r.Current.IDs.GNU; gnu != "" && !r.Current.IsCompanion() {
		pk := packageKey(ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: gnu})
		unlock := m.locked(pk)
		defer unlock()
		pr, err := m.loadRecord(ctx, pk)
		if err != nil {
			return err
		}
		if pr.Current != nil {
			if err := m.s.Delete(ctx, pk+"/record.json"); err != nil {
				return err
			}
			m.deleteFile(ctx, pr.Current)
		}
	}
	return nil
}

// List returns a page of records ordered by build ID, and the next page token. An
// executable's DWARF package has the executable's build ID, so records are ordered by build ID
// and then type, and a token names both.
func (m *Catalog) List(ctx context.Context, pageSize int, token string) ([]*debuginfov1.Debuginfo, string, error) {
	after, afterType := "", debuginfov1.DebuginfoType(-1)
	if token != "" {
		b, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil {
			return nil, "", fmt.Errorf("page token %q was not issued by this server", token)
		}
		switch t := string(b); {
		case strings.HasPrefix(t, "psym2:"):
			id, typ, ok := strings.Cut(strings.TrimPrefix(t, "psym2:"), "\x00")
			n, err := strconv.ParseInt(typ, 10, 32)
			if !ok || err != nil {
				return nil, "", fmt.Errorf("page token %q was not issued by this server", token)
			}
			after, afterType = id, debuginfov1.DebuginfoType(n)
		case strings.HasPrefix(t, "psym1:"):
			// Issued before packages shared build IDs: past every record of that build ID.
			after, afterType = strings.TrimPrefix(t, "psym1:"), debuginfov1.DebuginfoType(math.MaxInt32)
		default:
			return nil, "", fmt.Errorf("page token %q was not issued by this server", token)
		}
	}
	keys, err := m.s.List(ctx, "records/")
	if err != nil {
		return nil, "", err
	}
	less := func(id string, typ debuginfov1.DebuginfoType, id2 string, typ2 debuginfov1.DebuginfoType) bool {
		return id < id2 || id == id2 && typ < typ2
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
		if d := r.Proto(); d != nil && (token == "" || less(after, afterType, d.BuildId, d.Type)) {
			if r.Current != nil {
				// Only files that need companions cost a lookup more, and their quality with
				// companions stored since they were verified a read more (a build, once).
				if err := m.describeCompanions(ctx, r.Current, d); err != nil {
					return nil, "", err
				}
				if m.opt.Annotate != nil {
					m.opt.Annotate(ctx, r, d)
				}
			}
			all = append(all, d)
		}
	}
	sort.Slice(all, func(i, j int) bool { return less(all[i].BuildId, all[i].Type, all[j].BuildId, all[j].Type) })
	next := ""
	if len(all) > pageSize {
		all = all[:pageSize]
		last := all[len(all)-1]
		next = base64.RawURLEncoding.EncodeToString([]byte("psym2:" + last.BuildId + "\x00" + strconv.Itoa(int(last.Type))))
	}
	return all, next, nil
}
