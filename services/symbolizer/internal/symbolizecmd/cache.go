package symbolizecmd

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/profsym/profsym/pkg/debuginfo"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/index"
)

// indexCache keeps serialized indexes of the binaries `symbolize` has read, so a second run on
// the same binary loads the index (milliseconds) instead of building it (seconds on a large
// binary). An entry is named by what the index is built from: the binary's build IDs and
// htlhash, and the same of the debug file that was used, if any. A build ID names one build;
// the htlhash tells a stripped copy from the unstripped file of the same build.
type indexCache struct {
	dir      string
	maxBytes int64
}

const cacheSuffix = ".psymidx"

// DefaultCacheDir is where indexes are kept when --cache-dir is not given: the user's cache
// directory ($XDG_CACHE_HOME, else ~/.cache), under profsym/index.
func DefaultCacheDir() string {
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "profsym", "index")
}

// cacheDirOr is the cache directory given, or the default when none was.
func cacheDirOr(given string) string {
	if given != "" {
		return given
	}
	return DefaultCacheDir()
}

// touch marks a cache entry used now: the modification time orders entries for eviction.
func touch(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}

// key names the index of b. It fails only when the debug file cannot be read.
func (c *indexCache) key(b *debuginfo.Binary) (string, error) {
	ids := b.IDs()
	parts := []string{ids.GNU, ids.Go, ids.HTLHash}
	if dbg := b.Info().DebugFile; dbg != "" {
		d, err := buildid.FromFile(dbg)
		if err != nil {
			return "", fmt.Errorf("index cache: debug file %s: %w", dbg, err)
		}
		parts = append(parts, d.GNU, d.Go, d.HTLHash)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	// The readable part helps whoever looks into the directory; the hash makes it unique.
	name := ids.GNU
	if name == "" {
		name = ids.HTLHash
	}
	return name + "-" + hex.EncodeToString(sum[:8]) + cacheSuffix, nil
}

// An entry is entryMagic, the warnings of the index's build (a uvarint byte count, then
// JSON), and the index's own encoding, which checks itself.
const entryMagic = "profsym index cache 1\n"

// load returns the cached index named key and the warnings its build gave, or nil when there
// is none or it is unusable (an older format, a torn file), in which case it is removed.
func (c *indexCache) load(key string) (*index.Index, []string) {
	path := filepath.Join(c.dir, key)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	ix, warnings, err := decodeEntry(data)
	if err != nil {
		_ = os.Remove(path)
		return nil, nil
	}
	touch(path)
	return ix, warnings
}

func decodeEntry(data []byte) (*index.Index, []string, error) {
	rest, ok := bytes.CutPrefix(data, []byte(entryMagic))
	if !ok {
		return nil, nil, errors.New("not a cache entry of this version")
	}
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return nil, nil, errors.New("torn warnings")
	}
	var warnings []string
	if err := json.Unmarshal(rest[k:k+int(n)], &warnings); err != nil {
		return nil, nil, err
	}
	ix, err := index.Unmarshal(rest[k+int(n):])
	return ix, warnings, err
}

// store writes ix and its build's warnings under key (atomically: a reader never sees half a
// file), then evicts the least recently used entries beyond maxBytes.
func (c *indexCache) store(key string, ix *index.Index, warnings []string) error {
	encoded, err := ix.MarshalBinary()
	if err != nil {
		return fmt.Errorf("index cache: %w", err)
	}
	w, err := json.Marshal(warnings)
	if err != nil {
		return fmt.Errorf("index cache: %w", err)
	}
	// The header is written before the encoding, not joined to it: a copy of a large
	// binary's index would add tens of MB to the run's peak memory.
	header := binary.AppendUvarint([]byte(entryMagic), uint64(len(w)))
	header = append(header, w...)
	if c.maxBytes > 0 && int64(len(header)+len(encoded)) > c.maxBytes {
		return nil // larger than the whole cache: not kept
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("index cache: %w", err)
	}
	tmp, err := os.CreateTemp(c.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("index cache: %w", err)
	}
	_, werr := tmp.Write(header)
	if werr == nil {
		_, werr = tmp.Write(encoded)
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), filepath.Join(c.dir, key))
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("index cache: %w", werr)
	}
	return c.evict()
}

// evict removes the least recently used entries while the cache holds more than maxBytes:
// indexes, and the files fetched from debuginfod servers (kept in its debuginfod directory
// by build ID, see fromDebuginfod), which can be far larger than the indexes made from them.
// Remembered misses are removed once they have expired.
func (c *indexCache) evict() error {
	if c.maxBytes <= 0 {
		return nil
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("index cache: %w", err)
	}
	var files []cacheEntry
	var total int64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), cacheSuffix) {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile by another run
		}
		if err != nil {
			return fmt.Errorf("index cache: %w", err)
		}
		files = append(files, cacheEntry{filepath.Join(c.dir, e.Name()), info.Size(), info.ModTime()})
		total += info.Size()
	}
	fetched, err := fetchedEntries(filepath.Join(c.dir, debuginfodDir))
	if err != nil {
		return fmt.Errorf("index cache: %w", err)
	}
	for _, f := range fetched {
		files = append(files, f)
		total += f.size
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mtime.Before(files[j].mtime) })
	for _, f := range files {
		if total <= c.maxBytes {
			break
		}
		if err := os.RemoveAll(f.path); err != nil {
			return fmt.Errorf("index cache: %w", err)
		}
		total -= f.size
	}
	return nil
}

// cacheEntry is what eviction removes as a whole: an index file, or a build ID's directory
// of fetched files.
type cacheEntry struct {
	path  string
	size  int64
	mtime time.Time
}

// fetchedEntries lists the build-ID directories of dir (the cache's debuginfod directory)
// that hold a fetched file, and removes those that hold only an expired miss.
func fetchedEntries(dir string) ([]cacheEntry, error) {
	ids, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []cacheEntry
	for _, id := range ids {
		if !id.IsDir() {
			continue
		}
		path := filepath.Join(dir, id.Name())
		if info, err := os.Stat(filepath.Join(path, fetchedName)); err == nil {
			out = append(out, cacheEntry{path, info.Size(), info.ModTime()})
			continue
		}
		if info, err := os.Stat(filepath.Join(path, missName)); err == nil && time.Since(info.ModTime()) < missTTL {
			continue
		}
		// A download of another run may be under way in it.
		if info, err := id.Info(); err != nil || time.Since(info.ModTime()) < debuginfodTimeout {
			continue
		}
		// An expired miss, or a download that did not finish.
		if err := os.RemoveAll(path); err != nil {
			return nil, err
		}
	}
	return out, nil
}
