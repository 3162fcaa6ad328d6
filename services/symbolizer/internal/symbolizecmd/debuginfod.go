package symbolizecmd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/profsym/profsym/pkg/binaryid"
	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/services/symbolizer/internal/debuginfod"
)

// debuginfodTimeout bounds one file's download from one server.
const debuginfodTimeout = 2 * time.Minute

// debuginfodMaxSize is the largest file fetched: debug files of large C++ libraries run to
// a few GB.
const debuginfodMaxSize = 8 << 30

// fromDebuginfod is how a command asks debuginfod servers for what a binary lacks.
type fromDebuginfod struct {
	urls []string
	// cacheDir is the command's cache directory ("" for none): fetched files are kept by
	// build ID in its debuginfod directory, beside the indexes.
	cacheDir string
	warn     func(error)
}

// open opens the binary at path, and when it lacks what a debuginfod server can give, asks
// the servers in turn and opens it again with what they gave: its separate debug file when it
// has neither DWARF nor a Go pclntab and none was found on disk, then the supplementary (dwz)
// file its DWARF names when that is not on disk. A fetched file must carry the build ID it was
// asked for; failures are warnings, and the binary is answered from what it has. fetched
// lists what came from a server, and done removes it when there is no cache directory.
func (d fromDebuginfod) open(path string, base debuginfo.Options) (b *debuginfo.Binary, fetched []string, done func(), err error) {
	done = func() {}
	b, err = debuginfo.Open(path, base)
	if err != nil || len(d.urls) == 0 {
		return b, nil, done, err
	}
	dir := d.cacheDir
	if dir != "" {
		dir = filepath.Join(dir, debuginfodDir)
	} else {
		tmp, terr := os.MkdirTemp("", "symbolizer-debuginfod-")
		if terr != nil {
			// The binary is still answered, from what it has.
			d.warn(fmt.Errorf("debuginfod: no directory for the files fetched: %w", terr))
			return b, nil, done, err
		}
		dir, done = tmp, func() { _ = os.RemoveAll(tmp) }
	}
	info := b.Info()
	if id := info.IDs.GNU; !info.DWARF && !info.GoPclntab && info.DebugFile == "" && binaryid.ValidHex(id) {
		p, err := d.fetch(dir, id, func(path string) error {
			got, err := buildid.FromFile(path)
			if err == nil && got.GNU != id {
				err = fmt.Errorf("the file served has build ID %q", got.GNU)
			}
			return err
		})
		if err != nil {
			d.warn(fmt.Errorf("debuginfod: debug file of %s (build ID %s): %w", path, id, err))
		}
		if p != "" {
			base.DebugFile = p
			fetched = append(fetched, p)
			if b, err = reopen(b, path, base); err != nil {
				return nil, nil, done, err
			}
			info = b.Info()
		}
	}
	if sup := info.Supplementary; sup != nil && sup.Missing && binaryid.ValidHex(sup.ID) && base.SupplementaryFile == "" {
		p, err := d.fetch(dir, sup.ID, func(path string) error {
			got, ok, err := debuginfo.SupplementaryFileID(path, elfx.Limits{})
			if err == nil && (!ok || got != sup.ID) {
				err = fmt.Errorf("the file served is not the supplementary file with ID %s", sup.ID)
			}
			return err
		})
		if err != nil {
			d.warn(fmt.Errorf("debuginfod: supplementary file %s (ID %s): %w", sup.Name, sup.ID, err))
		}
		if p != "" {
			base.SupplementaryFile = p
			fetched = append(fetched, p)
			if b, err = reopen(b, path, base); err != nil {
				return nil, nil, done, err
			}
		}
	}
	return b, fetched, done, nil
}

func reopen(b *debuginfo.Binary, path string, opts debuginfo.Options) (*debuginfo.Binary, error) {
	// Only read from: a failing close loses nothing.
	_ = b.Close()
	return debuginfo.Open(path, opts)
}

// Files fetched from debuginfod servers are kept under the cache directory as
// debuginfod/<build ID>/debuginfo, and a build ID no server had as debuginfod/<build ID>/miss.
const (
	debuginfodDir = "debuginfod"
	fetchedName   = "debuginfo"
	missName      = "miss"
)

// missTTL is how long a build ID that no server had is not asked for again, as elfutils'
// client remembers its misses: a command run over and over on a binary nobody has debug
// files for should not wait for the servers each time.
const missTTL = 10 * time.Minute

// fetch returns the debuginfo of build ID id: kept in dir from an earlier run (check passed
// before it was kept), else from the first server that has one that check accepts. "" and no
// error when no server has it.
func (d fromDebuginfod) fetch(dir, id string, check func(path string) error) (string, error) {
	kept := filepath.Join(dir, id, fetchedName)
	if _, err := os.Stat(kept); err == nil {
		touch(kept)
		return kept, nil
	}
	miss := filepath.Join(dir, id, missName)
	if st, err := os.Stat(miss); err == nil && time.Since(st.ModTime()) < missTTL {
		return "", nil
	}
	if err := os.MkdirAll(filepath.Dir(kept), 0o755); err != nil {
		return "", err
	}
	hc := &http.Client{}
	var errs []error
	for _, u := range d.urls {
		ctx, cancel := context.WithTimeout(context.Background(), debuginfodTimeout)
		p, err := debuginfod.Download(ctx, hc, u+"/buildid/"+id+"/debuginfo", filepath.Dir(kept), debuginfodMaxSize)
		cancel()
		if errors.Is(err, debuginfod.ErrNotFound) {
			continue
		}
		if err == nil {
			if err = check(p); err != nil {
				err = errors.Join(fmt.Errorf("%s: %w", u, err), os.Remove(p))
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.Rename(p, kept); err != nil {
			return "", errors.Join(err, os.Remove(p))
		}
		return kept, nil
	}
	if len(errs) == 0 {
		// Every server answered that it has no such file.
		if err := os.WriteFile(miss, nil, 0o644); err != nil {
			return "", err
		}
		return "", nil
	}
	return "", errors.Join(errs...)
}
