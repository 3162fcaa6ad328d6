package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// Upload is a reserved, unfinished upload.
type Upload struct {
	ID        string                    `json:"id"`
	BuildID   ID                        `json:"build_id"`
	SHA256    string                    `json:"sha256"`
	Size      uint64                    `json:"size"`
	Type      debuginfov1.DebuginfoType `json:"type"`
	Source    debuginfov1.UploadSource  `json:"source"`
	ExpiresAt time.Time                 `json:"expires_at"`
	// Name is the binary's name as the uploader gave it (optional).
	Name string `json:"name,omitempty"`
}

// Object is where the upload's bytes are PUT.
func (u *Upload) Object() string { return "uploads/" + u.ID }

// Desc describes a file a client wants to upload.
type Desc struct {
	BuildID ID
	Type    debuginfov1.DebuginfoType
	SHA256  string
	Size    uint64
	Source  debuginfov1.UploadSource
	// Name is the binary's name (optional; retention keeps the last builds of each name).
	Name string
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

// rank orders files of the same binary: debuginfo over executable, then CI over debuginfod
// over node.
func rank(t debuginfov1.DebuginfoType, s debuginfov1.UploadSource) int {
	r := 0
	if t != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_EXECUTABLE {
		r = 10 // debuginfo, and companions, which only compete with their own kind
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

func (m *Catalog) decide(r *Record, d Desc, now time.Time) Decision {
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
func (m *Catalog) ShouldUpload(ctx context.Context, d Desc) (Decision, error) {
	key, err := m.keyFor(ctx, d.BuildID, d.Type)
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
func (m *Catalog) Initiate(ctx context.Context, d Desc) (*Upload, error) {
	key, err := m.keyFor(ctx, d.BuildID, d.Type)
	if err != nil {
		return nil, err
	}
	unlock, err := m.lockedShared(ctx, key, m.opt.InitiateWait)
	if errors.Is(err, ErrLocked) {
		// Another replica is reserving or verifying an upload of this binary right now.
		return nil, &DecisionError{Decision{false, debuginfov1.ShouldUploadReason_SHOULD_UPLOAD_REASON_UPLOAD_IN_PROGRESS,
			"another replica is reserving or verifying an upload of this binary"}}
	}
	if err != nil {
		return nil, err
	}
	defer unlock()
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
		Type: d.Type, Source: d.Source, ExpiresAt: now.Add(m.opt.UploadTTL).UTC(), Name: d.Name,
	}
	if err := m.saveRecord(ctx, r); err != nil {
		return nil, err
	}
	if err := m.writeJSON(ctx, "uploads-index/"+r.Pending.ID, newAlias(key)); err != nil {
		return nil, err
	}
	return r.Pending, nil
}

// PendingUpload finds the live upload with this ID, for the raw PUT endpoint.
func (m *Catalog) PendingUpload(ctx context.Context, uploadID string) (*Upload, error) {
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
