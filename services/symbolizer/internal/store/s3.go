package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config configures the S3 backend.
type S3Config struct {
	Endpoint  string // host:port, no scheme
	Bucket    string
	Region    string
	AccessKey string
	SecretKey string
	Insecure  bool   // plain HTTP
	Prefix    string // optional key prefix inside the bucket
	// MaxRetries bounds the attempts of one request; 0 keeps the client's default (10, which
	// with its backoff takes 6 to 9 s to report a store that is down).
	MaxRetries int
}

// S3 stores objects in an S3-compatible bucket. S3 objects are atomic by nature: a PUT
// that fails leaves no object.
type S3 struct {
	c      *minio.Client
	bucket string
	prefix string
}

// NewS3 connects to the bucket (it must exist).
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("s3: endpoint and bucket are required")
	}
	if cfg.MaxRetries < 0 {
		return nil, fmt.Errorf("s3: max retries %d: must not be negative", cfg.MaxRetries)
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: !cfg.Insecure,
		Region: cfg.Region,
		// minio.Options ignores values below 1.
		MaxRetries: cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 client for %s: %w", cfg.Endpoint, err)
	}
	p := strings.Trim(cfg.Prefix, "/")
	if p != "" {
		if err := CheckKey(p); err != nil {
			return nil, fmt.Errorf("s3 prefix: %w", err)
		}
		p += "/"
	}
	return &S3{c: c, bucket: cfg.Bucket, prefix: p}, nil
}

func (s *S3) String() string { return "s3 " + s.c.EndpointURL().Host + "/" + s.bucket }

// Bucket returns the client, the bucket and the key prefix, for what coordinates replicas
// through the bucket (pkg/lease).
func (s *S3) Bucket() (c *minio.Client, bucket, prefix string) { return s.c, s.bucket, s.prefix }

func (s *S3) key(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	return s.prefix + key, nil
}

func s3Err(key string, err error) error {
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return fmt.Errorf("%s: %w", key, ErrNotExist)
	}
	return fmt.Errorf("s3 %s: %w", key, err)
}

// Put uploads the object (multipart for large objects).
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	_, err = s.c.PutObject(ctx, s.bucket, k, r, size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return fmt.Errorf("s3 put %s: %w", key, err)
	}
	return nil
}

// Open starts a download.
func (s *S3) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, 0, err
	}
	obj, err := s.c.GetObject(ctx, s.bucket, k, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, s3Err(key, err)
	}
	st, err := obj.Stat()
	if err != nil {
		// Nothing was read yet: a failing close loses nothing.
		_ = obj.Close()
		return nil, 0, s3Err(key, err)
	}
	return &s3Body{obj: obj, key: key}, st.Size, nil
}

// s3Body names a replacement of the object during the read as ErrChanged: minio-go asks for
// the rest of an object with the ETag it first saw, and S3 answers a replaced one with
// PreconditionFailed.
type s3Body struct {
	obj *minio.Object
	key string
}

// Read reads the object. Open learns the size with a HEAD and the bytes come with the first
// Read's GET: an object
// deleted in between (retention, or a delete by hand) answers that GET NoSuchKey, named as
// ErrNotExist like a missing object at Open, so readers take it for gone, not for a store
// failure.
func (b *s3Body) Read(p []byte) (int, error) {
	n, err := b.obj.Read(p)
	if err != nil {
		switch minio.ToErrorResponse(err).Code {
		case "PreconditionFailed":
			err = fmt.Errorf("s3 %s: %w (%w)", b.key, ErrChanged, err)
		case minio.NoSuchKey:
			err = fmt.Errorf("s3 %s: %w (%w)", b.key, ErrNotExist, err)
		}
	}
	return n, err
}

func (b *s3Body) Close() error { return b.obj.Close() }

// Size stats the object.
func (s *S3) Size(ctx context.Context, key string) (int64, error) {
	k, err := s.key(key)
	if err != nil {
		return 0, err
	}
	st, err := s.c.StatObject(ctx, s.bucket, k, minio.StatObjectOptions{})
	if err != nil {
		return 0, s3Err(key, err)
	}
	return st.Size, nil
}

// Delete removes the object.
func (s *S3) Delete(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, k, minio.RemoveObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil
		}
		return fmt.Errorf("s3 delete %s: %w", key, err)
	}
	return nil
}

// Copy copies server-side.
func (s *S3) Copy(ctx context.Context, src, dst string) error {
	sk, err := s.key(src)
	if err != nil {
		return err
	}
	dk, err := s.key(dst)
	if err != nil {
		return err
	}
	_, err = s.c.CopyObject(ctx, minio.CopyDestOptions{Bucket: s.bucket, Object: dk}, minio.CopySrcOptions{Bucket: s.bucket, Object: sk})
	if err != nil {
		return s3Err(src+" -> "+dst, err)
	}
	return nil
}

// List lists keys with prefix.
func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for obj := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("s3 list %s: %w", prefix, obj.Err)
		}
		keys = append(keys, strings.TrimPrefix(obj.Key, s.prefix))
	}
	sort.Strings(keys)
	return keys, nil
}

// PresignPut presigns a PUT of the object.
func (s *S3) PresignPut(ctx context.Context, key string, expiry time.Duration) (string, map[string]string, bool, error) {
	k, err := s.key(key)
	if err != nil {
		return "", nil, false, err
	}
	u, err := s.c.PresignedPutObject(ctx, s.bucket, k, expiry)
	if err != nil {
		return "", nil, false, fmt.Errorf("s3 presign %s: %w", key, err)
	}
	return u.String(), map[string]string{}, true, nil
}

// EnsureBucket creates the bucket when it does not exist, for development setups (an in-cluster
// MinIO starts empty); production buckets are made, with their policies, by their owners.
func (s *S3) EnsureBucket(ctx context.Context, region string) error {
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("s3 bucket %s: %w", s.bucket, err)
	}
	if ok {
		return nil
	}
	if err := s.c.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: region}); err != nil {
		// Another replica may have made it in between.
		if ok, err2 := s.c.BucketExists(ctx, s.bucket); err2 == nil && ok {
			return nil
		}
		return fmt.Errorf("s3 create bucket %s: %w", s.bucket, err)
	}
	return nil
}

// Ping checks that the bucket exists and the credentials work.
func (s *S3) Ping(ctx context.Context) error {
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("s3 bucket %s: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("s3 bucket %s does not exist", s.bucket)
	}
	return nil
}
