package tenant

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// Store returns tenant t's view of s: every key is t's (Key), List answers t's keys only and
// without their prefix. The default tenant's view is s itself.
func Store(s store.Store, t string) store.Store {
	if t == "" {
		return s
	}
	v := &view{s: s, t: t}
	if l, ok := s.(store.Localer); ok {
		return &localView{view: v, l: l}
	}
	return v
}

type view struct {
	s store.Store
	t string
}

func (v *view) key(k string) string { return Key(v.t, k) }

func (v *view) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return v.s.Put(ctx, v.key(key), r, size)
}

func (v *view) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	return v.s.Open(ctx, v.key(key))
}

func (v *view) Size(ctx context.Context, key string) (int64, error) {
	return v.s.Size(ctx, v.key(key))
}

func (v *view) Delete(ctx context.Context, key string) error { return v.s.Delete(ctx, v.key(key)) }

func (v *view) Copy(ctx context.Context, src, dst string) error {
	return v.s.Copy(ctx, v.key(src), v.key(dst))
}

func (v *view) List(ctx context.Context, prefix string) ([]string, error) {
	keys, err := v.s.List(ctx, v.key(prefix))
	if err != nil {
		return nil, err
	}
	own := v.key("")
	out := keys[:0]
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, own)
		if !ok {
			return nil, fmt.Errorf("tenant %s: store listed %q outside its prefix", v.t, k)
		}
		out = append(out, rest)
	}
	return out, nil
}

func (v *view) PresignPut(ctx context.Context, key string, expiry time.Duration) (string, map[string]string, bool, error) {
	return v.s.PresignPut(ctx, v.key(key), expiry)
}

func (v *view) Ping(ctx context.Context) error { return v.s.Ping(ctx) }

func (v *view) String() string { return v.s.String() + " (tenant " + v.t + ")" }

// localView keeps the folder's in-place reads (store.Localer) through the view.
type localView struct {
	*view
	l store.Localer
}

func (v *localView) LocalPath(key string) (string, error) { return v.l.LocalPath(v.key(key)) }
