package server

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/minio/minio-go/v7"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/gen/profsym/debuginfo/v1/debuginfov1connect"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
	"github.com/profsym/profsym/pkg/testsupport"
)

// The S3 store on a real MinIO: the CLI uploads through a presigned URL, symbolization and
// the debuginfod paths read from the bucket, nothing is left under uploads/.
func TestS3EndToEnd(t *testing.T) {
	m := testsupport.StartMinIO(t)
	mc := m.NewBucket(t, "debuginfo")
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(m.SecretKey()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := start(t, "--s3-endpoint", m.Endpoint(), "--s3-bucket", "debuginfo", "--s3-region", m.Region(),
		"--s3-access-key", m.AccessKey(), "--s3-secret-key-file", secretFile, "--s3-insecure", "--index-cache-bytes", "1")
	bin := compile(t, "-g", "-O2")

	dc := debuginfov1connect.NewDebuginfoServiceClient(http.DefaultClient, r.url)
	init := connect.NewRequest(&debuginfov1.InitiateUploadRequest{BuildId: bin.ids.GNU, BuildIdType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU,
		Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO, Sha256: strings.Repeat("0", 64), Size: 10, Source: debuginfov1.UploadSource_UPLOAD_SOURCE_NODE})
	bearer(init)
	resp, err := dc.InitiateUpload(context.Background(), init)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(resp.Msg.UploadUrl, "X-Amz-Signature") || !strings.HasPrefix(resp.Msg.UploadUrl, "http://"+m.Endpoint()) {
		t.Fatalf("upload URL is not a presigned MinIO URL: %s", resp.Msg.UploadUrl)
	}
	// A different file for the same build ID is refused while that upload is live.
	if res := upload(t, r.url, bin.path); res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "aborted") {
		t.Fatalf("upload during another live upload = %+v", res[0])
	}
	// Another build of the program has its own build ID and uploads.
	bin = compile(t, "-g", "-O1")
	if res := upload(t, r.url, bin.path); res[0].Outcome != "uploaded" {
		t.Fatalf("upload = %+v", res[0])
	}

	client := symbolizerv1connect.NewSymbolizerServiceClient(http.DefaultClient, r.url)
	sresp, err := client.Symbolize(context.Background(), connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: bin.ids.GNU, Addresses: bin.addrs}}}))
	if err != nil {
		t.Fatal(err)
	}
	sameLocations(t, "s3", sresp.Msg.Modules[0], engineFrames(t, bin.path, bin.addrs))

	_, got := testsupport.Get(t, r.url+"/buildid/"+bin.ids.GNU+"/debuginfo")
	want, err := os.ReadFile(bin.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("debuginfod path from S3: %d bytes, want %d", len(got), len(want))
	}
	for obj := range mc.ListObjects(context.Background(), "debuginfo", minio.ListObjectsOptions{Prefix: "uploads/", Recursive: true}) {
		if obj.Err == nil && !strings.Contains(obj.Key, resp.Msg.UploadId) {
			t.Errorf("upload leftover %s", obj.Key)
		}
	}
	if code, body := testsupport.Get(t, r.url+"/readyz"); code != 200 {
		t.Fatalf("readyz with S3: %d %s", code, body)
	}
}
