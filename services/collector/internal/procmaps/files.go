package procmaps

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/profsym/profsym/pkg/debuginfo/addrmap"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
)

// FileKey identifies one version of a file: a file rewritten in place changes size or
// mtime, a file replaced by rename changes inode.
type FileKey struct {
	Dev     uint64
	Inode   uint64
	Size    int64
	MtimeNs int64
}

// KeyOf returns the key of the file st describes.
func KeyOf(st os.FileInfo) (FileKey, error) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return FileKey{}, fmt.Errorf("stat %s: no device and inode", st.Name())
	}
	return FileKey{
		Dev:     sys.Dev,
		Inode:   sys.Ino,
		Size:    st.Size(),
		MtimeNs: st.ModTime().UnixNano(),
	}, nil
}

// FileInfo is what the collector needs of a mapped file.
type FileInfo struct {
	Key FileKey
	// IDs are the file's build IDs; HTLHash is set for every readable file.
	IDs buildid.IDs
	// Loads are the PT_LOAD headers; empty for a file that is not ELF.
	Loads []addrmap.Load
	// IsGo is true for Go binaries (a Go build ID or a .gopclntab section).
	IsGo bool
	// Err is why the file could not be read or parsed; the other fields hold what is known.
	Err error
}

// FileCache computes FileInfo once per FileKey. It holds at most max entries and forgets the
// least recently used.
type FileCache struct {
	mu       sync.Mutex
	max      int
	entries  map[FileKey]*list.Element
	lru      *list.List // of *FileInfo, most recent first
	hits     uint64
	computes uint64
}

// NewFileCache returns a cache of at most max files.
func NewFileCache(max int) *FileCache {
	if max <= 0 {
		max = 1
	}
	return &FileCache{max: max, entries: make(map[FileKey]*list.Element), lru: list.New()}
}

// Get returns the info of the file with key, computing it from the file open returns when it
// is not cached. open is not called on a hit.
func (c *FileCache) Get(key FileKey, open func() (*os.File, error)) *FileInfo {
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		c.hits++
		fi := el.Value.(*FileInfo)
		c.mu.Unlock()
		return fi
	}
	c.computes++
	c.mu.Unlock()

	// Computed outside the lock: a large file takes a while, and two goroutines computing
	// the same file at once only waste work.
	fi := computeFileInfo(key, open)

	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*FileInfo)
	}
	c.entries[key] = c.lru.PushFront(fi)
	for c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.entries, old.Value.(*FileInfo).Key)
	}
	return fi
}

// Stats returns how many lookups hit and how many files were computed.
func (c *FileCache) Stats() (hits, computes uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.computes
}

// Len is the number of cached files.
func (c *FileCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

func computeFileInfo(key FileKey, open func() (*os.File, error)) *FileInfo {
	fi := &FileInfo{Key: key}
	fh, err := open()
	if err != nil {
		fi.Err = fmt.Errorf("open mapped file: %w", err)
		return fi
	}
	defer fh.Close()
	// The size from the key, not a second stat: the ID must describe the file version the
	// key names, and a file that shrank since fails the reads below instead of lying.
	size := key.Size
	if fi.IDs.HTLHash, err = buildid.HTLHash(fh, size); err != nil {
		fi.Err = fmt.Errorf("htlhash of %s: %w", fh.Name(), err)
		return fi
	}
	f, err := elfx.Open(fh, size, elfx.DefaultLimits())
	if errors.Is(err, elfx.ErrNotELF) {
		return fi
	}
	if err != nil {
		fi.Err = fmt.Errorf("parse ELF %s: %w", fh.Name(), err)
		return fi
	}
	fi.IDs.GNU, fi.IDs.Go = buildid.FromELF(f)
	fi.Loads = f.Loads()
	fi.IsGo = fi.IDs.Go != "" || f.Section(".gopclntab") != nil
	return fi
}
