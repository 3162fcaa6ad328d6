package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

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

// Finish verifies an upload and makes it the record's file.
func (m *Catalog) Finish(ctx context.Context, id ID, uploadID string) (*Record, error) {
	key, err := m.finishKey(ctx, id, uploadID)
	if err != nil {
		return nil, err
	}
	unlock, err := m.lockedShared(ctx, key, m.opt.FinishWait)
	if err != nil {
		return nil, err
	}
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
	if file.Type == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE {
		// A package answers to no ID of its own: its record is reached from the binary's.
		return m.storePackage(ctx, r, file, p)
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
		m.StoreIndex(ctx, file, ins.Companions.Variant(), ins.Index)
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

func (m *Catalog) verify(ctx context.Context, p *Upload, size uint64) (*File, *Inspection, error) {
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
	if p.Type == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE {
		// Nothing in a package names its executable; what can be checked is that it is one.
		units, ok, err := debuginfo.DWARFPackageUnits(path, m.opt.Limits)
		if err != nil {
			return nil, nil, HidePath(err, path, p.Object())
		}
		if !ok || units == 0 {
			return nil, nil, errors.New("not a DWARF package: no .debug_cu_index, or no units in it")
		}
		return &File{
			UploadID: p.ID, BuildID: p.BuildID, Type: p.Type, Source: p.Source,
			State: debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE, SHA256: sum, Size: size,
			UploadedAt: m.opt.Now().UTC(), PackageUnits: units, Name: p.Name,
		}, &Inspection{}, nil
	}
	ins, err := Inspect(path, m.opt.Limits, func(supID, gnu string) (Companions, debuginfo.Options, func(), error) {
		// A companion that cannot be had now must not fail the upload: the index is built
		// without it, stored under the variant that says so, and rebuilt when symbolization
		// finds the companion.
		c, err := m.companions(ctx, supID, gnu, true)
		if err == nil {
			opts, cleanup, ferr := c.Fetch(ctx, m.s, m.opt.TempDir)
			if ferr == nil {
				return c, opts, cleanup, nil
			}
			cleanup()
			err = ferr
		}
		m.opt.Logger.Warn("companions unavailable while verifying an upload; indexing without them", "upload", p.ID, "err", err)
		return Companions{}, debuginfo.Options{}, func() {}, nil
	})
	if err != nil {
		return nil, nil, HidePath(err, path, p.Object())
	}
	typ := p.Type
	switch {
	case ins.SupplementaryOf != "":
		// Recognized whatever it was declared as: it symbolizes nothing alone.
		typ = debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY
	case typ == debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY:
		return nil, nil, errors.New("not a supplementary DWARF file: its DWARF has units other than partial units and no .debug_sup marks it supplementary")
	}
	if !containsID(IDsOf(ins.IDs), p.BuildID) {
		return nil, nil, fmt.Errorf("the file does not carry build ID %s (it has gnu=%q go=%q htlhash=%q)", p.BuildID, ins.IDs.GNU, ins.IDs.Go, ins.IDs.HTLHash)
	}
	return &File{
		UploadID: p.ID, BuildID: p.BuildID, IDs: ins.IDs, Type: typ, Source: p.Source,
		State: debuginfov1.DebuginfoState_DEBUGINFO_STATE_AVAILABLE, Quality: ins.Quality,
		SHA256: sum, Size: size, UploadedAt: m.opt.Now().UTC(), Loads: ins.Loads, Runnable: ins.Runnable,
		Fidelity: fidelityOf(ins), Supplementary: ins.Supplementary, SkeletonUnits: ins.SkeletonUnits,
		SupplementaryOf: ins.SupplementaryOf, QualityVariant: ins.Companions.Variant(), Name: p.Name,
	}, ins, nil
}

// finishKey finds the record an upload belongs to: a DWARF package's own record (found by
// the upload's index entry, or, for a repeated FinishUpload, by the finished upload's ID),
// else the record id resolves to.
func (m *Catalog) finishKey(ctx context.Context, id ID, uploadID string) (string, error) {
	if id.Type == debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU && validUploadID(uploadID) {
		pk := packageKey(id)
		var a alias
		err := m.readJSON(ctx, "uploads-index/"+uploadID, &a)
		switch {
		case err == nil && a.Record == pk:
			return pk, nil
		case err != nil && !errors.Is(err, store.ErrNotExist):
			return "", err
		case errors.Is(err, store.ErrNotExist):
			r, err := m.loadRecord(ctx, pk)
			if err != nil {
				return "", err
			}
			if r.Current != nil && r.Current.UploadID == uploadID {
				return pk, nil
			}
		}
	}
	key, _, err := m.recordKeyFor(ctx, id)
	return key, err
}

// storePackage makes a verified DWARF package the file of its record.
func (m *Catalog) storePackage(ctx context.Context, r *Record, file *File, p *Upload) (*Record, error) {
	old := r.Current
	file.Object = r.Key + "/" + file.SHA256
	if err := m.s.Copy(ctx, p.Object(), file.Object); err != nil {
		return nil, err
	}
	r.Current, r.Pending = file, nil
	if err := m.saveRecord(ctx, r); err != nil {
		return nil, err
	}
	if old != nil && old.Object != file.Object {
		m.deleteFile(ctx, old)
	}
	m.deletePending(ctx, p)
	return r, nil
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
func (m *Catalog) MarkInvalid(ctx context.Context, key, sha, msg string) error {
	unlock, err := m.lockedShared(ctx, key, m.opt.FinishWait)
	if err != nil {
		return err
	}
	defer unlock()
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

func fidelityOf(ins *Inspection) index.Fidelity {
	if ins.Index == nil {
		return index.FidelityNone
	}
	return ins.Index.Fidelity()
}

// Ingest stores a local file as an upload would (Initiate, copy, Finish): used for files the
// server fetched itself from debuginfod. A file already stored or beaten by a stored one is
// not an error; the record under id is returned either way.
func (m *Catalog) Ingest(ctx context.Context, id ID, path string, typ debuginfov1.DebuginfoType, source debuginfov1.UploadSource) (*Record, error) {
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
