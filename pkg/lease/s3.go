package lease

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// NewS3 returns a Manager of leases kept as objects in an S3 bucket (Prefix, default "leases/",
// is put before each key), for replicas that share a bucket but no Redis. A lease object holds
// its holder's token and when it expires; it is created with If-None-Match: * and replaced
// (taken over once expired, renewed, released) with If-Match on the ETag it was read with, so
// of several replicas writing at once one wins and the others are refused (412). S3 has had
// conditional writes since 2024, MinIO before that. Expiry is by the writer's clock: replicas'
// clocks must agree to well within the TTL (NTP does). Released leases are left as objects
// that read as expired (a delete is not conditional, and could remove a successor's).
func NewS3(c *minio.Client, bucket string, opt Options) *Manager {
	if opt.Prefix == "" {
		opt.Prefix = "leases/"
	}
	return newManager(s3Backend{c: c, bucket: bucket}, opt)
}

type s3Backend struct {
	c      *minio.Client
	bucket string
}

// lease is what a lease object says.
type lease struct {
	token   string
	expires time.Time
	etag    string
}

func (l lease) live(now time.Time) bool { return l.token != "" && now.Before(l.expires) }

// read returns the key's lease; found is false when there is no object. It is one GET (the
// low-level client: the high-level one reads in several requests, the later ones conditional
// on the first one's ETag, which another replica's write between them fails).
func (b s3Backend) read(ctx context.Context, key string) (l lease, found bool, err error) {
	body, info, _, err := minio.Core{Client: b.c}.GetObject(ctx, b.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return lease{}, false, nil
		}
		return lease{}, false, err
	}
	defer func() { _ = body.Close() }() // a read body: nothing to flush
	data, err := io.ReadAll(io.LimitReader(body, 256))
	if err != nil {
		return lease{}, false, err
	}
	l = lease{etag: info.ETag}
	token, ms, ok := strings.Cut(strings.TrimSpace(string(data)), " ")
	n, perr := strconv.ParseInt(ms, 10, 64)
	if !ok || perr != nil {
		// Not written by this package: taken as expired, so the next taker replaces it.
		return l, true, nil
	}
	l.token, l.expires = token, time.UnixMilli(n)
	return l, true, nil
}

// changed reports an S3 error that says an object changed under a conditional request.
func changed(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.StatusCode == http.StatusPreconditionFailed || r.Code == "PreconditionFailed"
}

// write puts token's lease until expires, only if the object is absent (etag "") or still
// the version read (etag); false when another writer got there first.
func (b s3Backend) write(ctx context.Context, key, token string, expires time.Time, etag string) (bool, error) {
	body := []byte(token + " " + strconv.FormatInt(expires.UnixMilli(), 10))
	opts := minio.PutObjectOptions{ContentType: "text/plain"}
	if etag == "" {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(etag)
	}
	_, err := b.c.PutObject(ctx, b.bucket, key, bytes.NewReader(body), int64(len(body)), opts)
	if err == nil {
		return true, nil
	}
	// 412: the object exists (If-None-Match) or changed (If-Match); 409: a conditional write
	// of the same object is in flight.
	if r := minio.ToErrorResponse(err); changed(err) || r.StatusCode == http.StatusConflict || r.Code == "ConditionalRequestConflict" {
		return false, nil
	}
	return false, fmt.Errorf("conditional put: %w", err)
}

func (b s3Backend) take(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	l, found, err := b.read(ctx, key)
	if err != nil {
		return false, err
	}
	now := time.Now()
	if found && l.live(now) {
		return false, nil
	}
	return b.write(ctx, key, token, now.Add(ttl), l.etag)
}

func (b s3Backend) renew(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	l, found, err := b.read(ctx, key)
	if err != nil {
		return false, err
	}
	if !found || l.token != token {
		return false, nil
	}
	return b.write(ctx, key, token, time.Now().Add(ttl), l.etag)
}

func (b s3Backend) drop(ctx context.Context, key, token string) error {
	l, found, err := b.read(ctx, key)
	if err != nil || !found || l.token != token {
		return err
	}
	_, err = b.write(ctx, key, "released", time.UnixMilli(0), l.etag)
	return err
}

func (b s3Backend) held(ctx context.Context, key string) (bool, error) {
	l, _, err := b.read(ctx, key)
	return l.live(time.Now()), err
}
