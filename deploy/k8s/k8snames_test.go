package k8s_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	// The gateway compresses its exports (compression: gzip): the backend must decompress.
	_ "google.golang.org/grpc/encoding/gzip"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/profsym/profsym/pkg/otlpattr"
	"github.com/profsym/profsym/pkg/otlpprofiles/otlptest"
)

// backendSink stands in for the OTLP backend the production renderings send to: a real OTLP
// profiles gRPC server on loopback that keeps what it receives.
type backendSink struct {
	addr string
	mu   sync.Mutex
	got  []pprofile.Profiles
}

func startBackendSink(t *testing.T) *backendSink {
	t.Helper()
	b := &backendSink{}
	srv := otlptest.NewProfilesServer(func(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
		pd := pprofile.NewProfiles()
		req.Profiles().CopyTo(pd)
		b.mu.Lock()
		b.got = append(b.got, pd)
		b.mu.Unlock()
		return pprofileotlp.NewExportResponse(), nil
	})
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = lis.Addr().String()
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return b
}

func (b *backendSink) received() []pprofile.Profiles {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]pprofile.Profiles(nil), b.got...)
}

// checkK8sNames sends the started gateway a profile whose resource carries the container.id of
// a pod that exists in the test's kube-apiserver, as our collector sends it, and expects it to
// come out (in the OTLP file or at the backend, as the rendering configures) with that pod's
// namespace, name and container name: k8s_attributes as rendered, with the rendered rights.
func checkK8sNames(t *testing.T, c *cluster, configPath string, grpcAddr string) {
	t.Helper()
	raw, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	api := apiServer(t)
	ctx := t.Context()

	// A workload pod, running as far as the API knows: its container's ID is what the
	// collector reads from a process's cgroup.
	const ns = "profsym-test-workloads"
	if _, err := api.typed.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	id := make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	containerID := hex.EncodeToString(id)
	podName := "app-" + containerID[:8]
	pod, err := api.typed.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Image: "registry.example/app:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "server", ContainerID: "containerd://" + containerID, Image: "registry.example/app:1", Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
	}}}
	if _, err := api.typed.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	creds := insecure.NewCredentials()
	if get(cfg, "receivers::otlp::protocols::grpc::tls::cert_file") != nil {
		// Mutual TLS: the collectors' certificate and the cluster CA, as the collector has them.
		kp, err := tls.X509KeyPair([]byte(c.secrets["collector-tls"]["tls.crt"]), []byte(c.secrets["collector-tls"]["tls.key"]))
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(c.secrets["profsym-ca"]["ca.crt"]))
		creds = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{kp}, RootCAs: pool, MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pprofileotlp.NewGRPCClient(conn)

	filePath, _ := get(cfg, "exporters::file::path").(string)
	var attrs map[string]string
	deadline := time.Now().Add(20 * time.Second)
	for attempt := 1; attrs == nil || attrs["k8s.pod.name"] == ""; attempt++ {
		if time.Now().After(deadline) {
			t.Errorf("gateway: after %d profiles with container.id %s, none came out with the pod's names (last resource attributes %v; file %q, %d requests at the backend)", attempt-1, containerID, attrs, filePath, len(c.sink.received()))
			return
		}
		pd := otlptest.Realistic(8, 2)
		res := pd.ResourceProfiles().At(0).Resource().Attributes()
		res.PutStr(otlpattr.ContainerID, containerID)
		res.PutStr(otlpattr.HostName, "node-1")
		sendCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := client.Export(sendCtx, pprofileotlp.NewExportRequestFromProfiles(pd))
		cancel()
		if err != nil {
			t.Fatalf("gateway: export: %v", err)
		}
		// The file exporter flushes every second; the OTLP exporter sends at once.
		time.Sleep(1500 * time.Millisecond)
		var outs []pprofile.Profiles
		if filePath != "" {
			outs, err = readOTLPFile(filePath)
			if err != nil {
				t.Fatalf("gateway: OTLP file %s: %v", filePath, err)
			}
		} else if c.sink != nil {
			outs = c.sink.received()
		}
		if found := resourceAttrs(outs, containerID); found != nil {
			attrs = found
		}
	}
	want := map[string]string{"k8s.namespace.name": ns, "k8s.pod.name": podName, "k8s.container.name": "server", "k8s.pod.uid": string(pod.UID), "host.name": "node-1"}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("gateway: resource attribute %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
	t.Logf("gateway: a profile of container %s… came out with %s/%s container %s", containerID[:12], attrs["k8s.namespace.name"], attrs["k8s.pod.name"], attrs["k8s.container.name"])
}

// readOTLPFile reads the file exporter's proto output: requests one after the other, each after
// its 4-byte big-endian length.
func readOTLPFile(path string) ([]pprofile.Profiles, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []pprofile.Profiles
	for {
		var n uint32
		if err := binary.Read(f, binary.BigEndian, &n); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return out, err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(f, b); err != nil {
			return out, fmt.Errorf("record of %d bytes: %w", n, err)
		}
		pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
		if err != nil {
			return out, err
		}
		out = append(out, pd)
	}
}

// resourceAttrs returns the string attributes of a resource with the container ID, one with a
// pod name if there is one.
func resourceAttrs(outs []pprofile.Profiles, containerID string) map[string]string {
	var seen map[string]string
	for _, pd := range outs {
		for i := 0; i < pd.ResourceProfiles().Len(); i++ {
			a := pd.ResourceProfiles().At(i).Resource().Attributes()
			if v, ok := a.Get(otlpattr.ContainerID); !ok || v.AsString() != containerID {
				continue
			}
			m := map[string]string{}
			for k, v := range a.All() {
				m[k] = v.AsString()
			}
			if m["k8s.pod.name"] != "" {
				return m
			}
			seen = m
		}
	}
	return seen
}
