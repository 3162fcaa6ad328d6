package upgrade

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/profsym/profsym/pkg/testsupport"
)

// TestBackupAndRestore: what a symbolizer must have backed up is its store alone (Redis is a
// cache). A copy of the store, a folder copied or a bucket's objects copied into a bucket of
// another MinIO server, serves a new symbolizer that answers every address as the first did,
// with the original gone and a Redis that starts empty.
func TestBackupAndRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs MinIO and symbolizers")
	}
	bin := currentBinary(t)
	ps := programs(t, 2, 1)
	dir := t.TempDir()
	answers := func(r *replica) map[string]answer {
		t.Helper()
		out := map[string]answer{}
		for _, p := range ps {
			a, err := symbolize(t.Context(), r.url, p, 0, len(p.addrs))
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			out[p.name] = a
		}
		return out
	}
	same := func(what string, got, want map[string]answer) {
		t.Helper()
		for _, p := range ps {
			for i := range p.addrs {
				if !slices.Equal(got[p.name][i], want[p.name][i]) {
					t.Fatalf("%s: %s at %#x = %+v, want %+v", what, p.name, p.addrs[i], got[p.name][i], want[p.name][i])
				}
			}
		}
	}

	t.Run("folder", func(t *testing.T) {
		orig, copied := filepath.Join(t.TempDir(), "store"), filepath.Join(t.TempDir(), "restored")
		r := startReplica(t, bin, current, "folder", dir, "--store-dir", orig, "--upload-token", token)
		for _, p := range ps {
			upload(t, bin, r.url, p)
		}
		want := answers(r)
		r.stop(t)
		// The backup: the folder as it is (cp -a, rsync -a, a volume snapshot).
		if err := os.CopyFS(copied, os.DirFS(orig)); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(orig); err != nil {
			t.Fatal(err)
		}
		restored := startReplica(t, bin, current, "folder-restored", dir, "--store-dir", copied, "--upload-token", token)
		same("restored folder", answers(restored), want)
	})

	t.Run("minio", func(t *testing.T) {
		src, dst := testsupport.StartMinIO(t), testsupport.StartMinIO(t)
		args := func(m *testsupport.MinIO, bucket string) []string {
			secret := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(secret, []byte(m.SecretKey()+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{"--s3-endpoint", m.Endpoint(), "--s3-bucket", bucket, "--s3-region", m.Region(),
				"--s3-access-key", m.AccessKey(), "--s3-secret-key-file", secret, "--s3-insecure", "--upload-token", token}
		}
		sc, dc := src.NewBucket(t, "profsym"), dst.NewBucket(t, "profsym-restored")
		r := startReplica(t, bin, current, "minio", dir, args(src, "profsym")...)
		for _, p := range ps {
			upload(t, bin, r.url, p)
		}
		want := answers(r)
		r.stop(t)
		// The backup: every object of the bucket, as mc mirror or aws s3 sync copy them.
		n := 0
		for obj := range sc.ListObjects(t.Context(), "profsym", minio.ListObjectsOptions{Recursive: true}) {
			if obj.Err != nil {
				t.Fatal(obj.Err)
			}
			rd, err := sc.GetObject(t.Context(), "profsym", obj.Key, minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dc.PutObject(t.Context(), "profsym-restored", obj.Key, rd, obj.Size, minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			_ = rd.Close()
			n++
		}
		t.Logf("%d objects copied", n)
		src.Stop()
		restored := startReplica(t, bin, current, "minio-restored", dir, args(dst, "profsym-restored")...)
		same("restored bucket", answers(restored), want)
	})
}
