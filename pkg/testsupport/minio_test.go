package testsupport

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestMinIOBucketPutGetPresigned(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := StartMinIO(t)
	if len(m.AccessKey()) < 8 || len(m.SecretKey()) < 8 {
		t.Fatalf("credentials shorter than MinIO's 8-character minimum")
	}

	c := m.NewBucket(t, "debuginfo")
	loc, err := c.GetBucketLocation(ctx, "debuginfo")
	if err != nil {
		t.Fatalf("bucket location: %v", err)
	}
	if loc != m.Region() {
		t.Fatalf("bucket location %q, want %q", loc, m.Region())
	}

	payload := bytes.Repeat([]byte("profsym"), 1000)
	if _, err := c.PutObject(ctx, "debuginfo", "a/b", bytes.NewReader(payload), int64(len(payload)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got := readObject(ctx, t, c, "debuginfo", "a/b"); !bytes.Equal(got, payload) {
		t.Fatalf("get returned %d bytes, want the %d put", len(got), len(payload))
	}

	u, err := c.PresignedPutObject(ctx, "debuginfo", "presigned", 5*time.Minute)
	if err != nil {
		t.Fatalf("presign PUT: %v", err)
	}
	body := []byte("uploaded without credentials")
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("presigned PUT: %v", err)
	}
	respBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned PUT: status %d: %s", resp.StatusCode, respBody)
	}
	if got := readObject(ctx, t, c, "debuginfo", "presigned"); !bytes.Equal(got, body) {
		t.Fatalf("presigned object reads back as %q", got)
	}

	// The same URL signed for another object must not be accepted for this
	// one: the server checks signatures.
	tampered := *u
	tampered.Path = "/debuginfo/other"
	req, err = http.NewRequestWithContext(ctx, http.MethodPut, tampered.String(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("tampered PUT: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("tampered presigned PUT: status %d, want 403", resp.StatusCode)
	}
}

func readObject(ctx context.Context, t *testing.T, c *minio.Client, bucket, key string) []byte {
	t.Helper()
	obj, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get %s/%s: %v", bucket, key, err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("read %s/%s: %v", bucket, key, err)
	}
	return b
}
