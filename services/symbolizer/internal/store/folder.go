package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Folder stores objects as files under a directory. Writes go to a temporary file in the
// same file system and are renamed into place, so an object appears whole or not at all.
type Folder struct {
	root string
}

const folderTmp = ".tmp"

// NewFolder creates (if needed) and opens the folder store at dir.
func NewFolder(dir string) (*Folder, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("store folder %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, folderTmp), 0o755); err != nil {
		return nil, fmt.Errorf("create store folder %s: %w", abs, err)
	}
	// Leftovers of a crash mid-write are never visible objects; clear them.
	if entries, err := os.ReadDir(filepath.Join(abs, folderTmp)); err == nil {
		for _, e := range entries {
			// One that stays costs disk space only; the next start tries again.
			if err := os.Remove(filepath.Join(abs, folderTmp, e.Name())); err != nil {
				slog.Warn("remove leftover temporary file", "path", filepath.Join(abs, folderTmp, e.Name()), "err", err)
			}
		}
	}
	return &Folder{root: abs}, nil
}

func (f *Folder) String() string { return "folder " + f.root }

// LocalPath returns the file holding key.
func (f *Folder) LocalPath(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if key == folderTmp || strings.HasPrefix(key, folderTmp+"/") {
		return "", fmt.Errorf("object key %q is reserved", key)
	}
	return filepath.Join(f.root, filepath.FromSlash(key)), nil
}

// Put writes the object through a temporary file.
func (f *Folder) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	path, err := f.LocalPath(key)
	if err != nil {
		return err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(f.root, folderTmp, hex.EncodeToString(rnd[:]))
	w, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	n, err := io.Copy(w, io.LimitReader(ctxReader{ctx, r}, size+1))
	if err == nil && n != size {
		err = fmt.Errorf("body has %d bytes, want %d", n, size)
	}
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.moveInto(tmp, path)
	}
	if err != nil {
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("remove temporary file: %w", rerr))
		}
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// moveInto renames tmp to path, making path's directory first. Delete prunes directories that
// become empty, so a concurrent Delete can remove the directory between MkdirAll and Rename
// (the last upload of uploads/ finishing while the next one arrives): make it again and retry.
func (f *Folder) moveInto(tmp, path string) error {
	var err error
	for range 32 {
		// MkdirAll can lose the same race (it saw the directory appear, then vanish).
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return err
		}
		if err = os.Rename(tmp, path); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if _, serr := os.Stat(tmp); serr != nil {
			return err // the temporary file itself is gone: nothing to retry
		}
	}
	return err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Open opens the object's file.
func (f *Folder) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	path, err := f.LocalPath(key)
	if err != nil {
		return nil, 0, err
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, 0, notExist(key, err)
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, 0, fmt.Errorf("open %s: not a regular file (%w): %w", key, err, ErrNotExist)
	}
	if !st.Mode().IsRegular() {
		fh.Close()
		return nil, 0, fmt.Errorf("open %s: not a regular file: %w", key, ErrNotExist)
	}
	return fh, st.Size(), nil
}

func notExist(key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", key, ErrNotExist)
	}
	return fmt.Errorf("%s: %w", key, err)
}

// Size stats the object's file.
func (f *Folder) Size(ctx context.Context, key string) (int64, error) {
	path, err := f.LocalPath(key)
	if err != nil {
		return 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, notExist(key, err)
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: not a regular file: %w", key, ErrNotExist)
	}
	return st.Size(), nil
}

// Delete removes the object's file and the directories it leaves empty.
func (f *Folder) Delete(ctx context.Context, key string) error {
	path, err := f.LocalPath(key)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	f.removeEmptyParents(path)
	return nil
}

// removeEmptyParents removes the directories above path that are now empty. The first one
// that cannot be removed, normally because it still holds objects, ends the climb.
func (f *Folder) removeEmptyParents(path string) {
	for dir := filepath.Dir(path); dir != f.root && strings.HasPrefix(dir, f.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			return
		}
	}
}

// Copy copies through a temporary file.
func (f *Folder) Copy(ctx context.Context, src, dst string) error {
	rc, size, err := f.Open(ctx, src)
	if err != nil {
		return err
	}
	defer rc.Close()
	return f.Put(ctx, dst, rc, size)
}

// List walks the folder below prefix.
func (f *Folder) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, rerr := filepath.Rel(f.root, p)
		if rerr != nil {
			return rerr
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == folderTmp {
				return filepath.SkipDir
			}
			// Only descend where keys with prefix can be.
			if rel != "." && !strings.HasPrefix(rel+"/", prefix) && !strings.HasPrefix(prefix, rel+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && strings.HasPrefix(rel, prefix) {
			keys = append(keys, rel)
		}
		return ctx.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}

// PresignPut is not available for a folder.
func (f *Folder) PresignPut(ctx context.Context, key string, expiry time.Duration) (string, map[string]string, bool, error) {
	return "", nil, false, nil
}

// Ping checks that the folder is writable.
func (f *Folder) Ping(ctx context.Context) error {
	st, err := os.Stat(filepath.Join(f.root, folderTmp))
	if err != nil {
		return fmt.Errorf("store folder %s: %w", f.root, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("store folder %s: %s is not a directory", f.root, folderTmp)
	}
	return nil
}
