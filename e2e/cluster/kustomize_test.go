//go:build linux

package cluster_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/elf"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/profsym/profsym/e2e/cluster"
	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
	"github.com/profsym/profsym/gen/profsym/symbolizer/v1/symbolizerv1connect"
)

// productionImages are the offline builder's images the production overlay runs with its store
// and cache in the cluster.
const productionImages = "symbolizer,gateway,collector,redis,minio"

// symbolizerServiceIP is the symbolizer Service's address, set by the test's overlay so that
// the symbolizer's certificate can name it: the test's clients dial it from the network
// namespace, where the cluster DNS names do not resolve. An address of the Service range's
// static band (its first 16), which the API server never hands out on its own.
const symbolizerServiceIP = "10.96.0.13"

const (
	e2eUploadToken   = "upload-token-kustomize-e2e"
	e2eReadToken     = "read-token-kustomize-e2e"
	e2eRedisPassword = "redis-password-kustomize-e2e"
)

// TestKustomizeProductionOnCluster applies the production overlay (deploy/k8s/overlays/production,
// rendered from the chart) with `kubectl apply -k` on the cluster, as an operator does: an
// overlay of the operator's own adds the Secrets the production overlay names (tokens, the S3
// keys, the Redis password, certificates from one CA for TLS and mutual TLS), its object store
// and cache in the cluster (MinIO from deploy/k8s/minio on a PersistentVolume, a Redis with a
// password on the overlay's Redis port) and points the symbolizer at them, with one replica of
// each Deployment (two cores). Every pod must become Ready through its own probes (the
// symbolizer's over HTTPS) with no restart; a binary uploaded to the symbolizer over TLS must
// come back symbolized by Symbolize; the collectors' profiles must reach the gateway through
// mutual TLS; and every NetworkPolicy must select the pods it is written for.
//
// The cluster has no StorageClass or provisioner: the test creates the PersistentVolume (a
// hostPath in a temporary folder) that MinIO's claim binds to. The production overlay itself
// claims no volume (S3 store; the gateway's queue is an emptyDir). The bridge CNI plugin does
// not enforce NetworkPolicies: the test checks that the API server accepts them and that their
// selectors match the pods, not that traffic is refused.
func TestKustomizeProductionOnCluster(t *testing.T) {
	needCluster(t)
	ctx := t.Context()
	c, _, root, _ := upWithImages(t, productionImages)

	// As docs/operations.md says for production: the namespaces first, then the Secrets (and,
	// here, the store and the cache, which in production exist before profsym), then the overlay.
	overlay := t.TempDir()
	ca, minioData := writeProductionOverlay(t, root, overlay)
	client, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	namespaces := filepath.Join(root, "deploy/k8s/overlays/production/generated/namespaces.yaml")
	if out, err := c.Kubectl(ctx, nil, "apply", "-f", namespaces); err != nil {
		t.Fatalf("kubectl apply -f %s: %v\n%s", namespaces, err, out)
	}
	if out, err := c.Kubectl(ctx, nil, "apply", "-k", filepath.Join(overlay, "store")); err != nil {
		t.Fatalf("kubectl apply -k (the store and the Secrets): %v\n%s", err, out)
	}
	if err := waitChartReady(ctx, t, client, map[string]string{"minio": "profsym", "redis": "profsym"}, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	if out, err := c.Kubectl(ctx, nil, "apply", "-k", filepath.Join(overlay, "overlay")); err != nil {
		t.Fatalf("kubectl apply -k (the production overlay): %v\n%s", err, out)
	}

	want := map[string]string{ // app.kubernetes.io/name -> namespace
		"symbolizer": "profsym", "gateway": "profsym", "minio": "profsym", "redis": "profsym", "collector": "profsym-collector",
	}
	if err := waitChartReady(ctx, t, client, want, 5*time.Minute); err != nil {
		for _, ns := range []string{"profsym", "profsym-collector"} {
			out, _ := c.Kubectl(context.Background(), nil, "describe", "pods", "-n", ns)
			t.Logf("kubectl describe pods -n %s:\n%s", ns, out)
			logs, _ := c.Kubectl(context.Background(), nil, "logs", "-n", ns, "--all-containers", "--prefix", "--tail=40", "-l", "app.kubernetes.io/name")
			t.Logf("logs -n %s:\n%s", ns, logs)
		}
		t.Fatal(err)
	}
	t.Logf("every pod Ready %v after kubectl apply -k", time.Since(applied).Round(time.Millisecond))

	pvc, err := client.CoreV1().PersistentVolumeClaims("profsym").Get(ctx, "minio-data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName != "profsym-e2e-minio-data" {
		t.Errorf("MinIO's claim: %s to %q, want Bound to the test's PersistentVolume", pvc.Status.Phase, pvc.Spec.VolumeName)
	}
	// The collector is Ready once its eBPF programs are attached (/readyz), with the overlay's
	// capabilities under the runtime's default seccomp profile.
	logs, err := c.Kubectl(ctx, nil, "logs", "-n", "profsym-collector", "-l", "app.kubernetes.io/name=collector", "--tail=-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), "eBPF sampler attached") {
		t.Errorf("the collector is Ready but its log does not say the eBPF sampler attached:\n%s", logs)
	}

	t.Run("network policies select their pods", func(t *testing.T) {
		checkPolicySelectors(ctx, t, client)
	})
	t.Run("upload and Symbolize over TLS", func(t *testing.T) {
		checkUploadSymbolize(ctx, t, c, client, ca)
	})
	t.Run("collector to gateway over mutual TLS", func(t *testing.T) {
		checkGatewayReceives(ctx, t, c, client)
	})
	t.Run("store on its volume, cache with its password", func(t *testing.T) {
		// MinIO keeps the bucket the symbolizer created, and the uploaded object, on the
		// PersistentVolume's folder.
		if _, err := os.Stat(filepath.Join(minioData, "profsym-debuginfo")); err != nil {
			t.Errorf("MinIO's PersistentVolume holds no bucket profsym-debuginfo: %v", err)
		}
		checkRedisUsed(ctx, t, c, client)
	})
}

// checkRedisUsed waits until the Redis of the store holds keys, written by the symbolizer (its
// result cache) through the URL and password the overlay gave it; the test reads it with the
// same password from the network namespace.
func checkRedisUsed(ctx context.Context, t *testing.T, c *cluster.Cluster, client *kubernetes.Clientset) {
	pods, err := client.CoreV1().Pods("profsym").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=redis"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("redis pods: %v (%d)", err, len(pods.Items))
	}
	rc := redis.NewClient(&redis.Options{
		Addr: net.JoinHostPort(pods.Items[0].Status.PodIP, "6380"), Password: e2eRedisPassword,
		Dialer: c.Dialer().DialContext, DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second,
	})
	defer rc.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := rc.DBSize(ctx).Result()
		if err == nil && n > 0 {
			t.Logf("Redis holds %d keys of the symbolizer", n)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis holds no key of the symbolizer a minute after Symbolize (%d, %v)", n, err)
		}
		time.Sleep(time.Second)
	}
}

// storeManifests are the operator's own objects beside the production overlay: MinIO's volume
// (no provisioner here: a PersistentVolume on a hostPath, bound to MinIO's claim) and a Redis
// with a password on the overlay's Redis port (6380), its configuration from a Secret so the
// password is on no command line. %s is the hostPath folder.
const storeManifests = `apiVersion: v1
kind: PersistentVolume
metadata:
  name: profsym-e2e-minio-data
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: %s, type: Directory}
  claimRef: {namespace: profsym, name: minio-data}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: minio-data
  namespace: profsym
spec:
  storageClassName: ""
  volumeName: profsym-e2e-minio-data
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: redis
  namespace: profsym
  labels: {app.kubernetes.io/name: redis}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: redis}
  template:
    metadata:
      labels: {app.kubernetes.io/name: redis}
    spec:
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 999
        runAsGroup: 999
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: redis
          # The image of the chart's in-cluster Redis (symbolizer.redis.inCluster.image), built
          # offline from Debian's redis-server.
          image: redis:7.4.6
          imagePullPolicy: Never
          args: [/etc/redis/redis.conf]
          ports:
            - {name: redis, containerPort: 6380}
          readinessProbe:
            tcpSocket: {port: redis}
            periodSeconds: 5
          resources:
            requests: {cpu: 50m, memory: 64Mi}
            limits: {cpu: 500m, memory: 256Mi}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
          volumeMounts:
            - {name: config, mountPath: /etc/redis, readOnly: true}
            - {name: data, mountPath: /data}
      volumes:
        - name: config
          secret: {secretName: redis-config}
        - name: data
          emptyDir: {sizeLimit: 64Mi}
---
apiVersion: v1
kind: Service
metadata:
  name: redis
  namespace: profsym
spec:
  selector: {app.kubernetes.io/name: redis}
  ports:
    - {name: redis, port: 6380, targetPort: redis}
`

// storeKustomization is what the operator creates before applying the production overlay: its
// Secrets (tokens, the S3 keys, the Redis password, certificates from one CA) and, here in the
// cluster, its object store and cache. %[1]s is the relative path to the repository's
// deploy/k8s.
const storeKustomization = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %[1]s/minio
  - store.yaml
generatorOptions:
  disableNameSuffixHash: true
secretGenerator:
  - {name: profsym-upload-tokens, namespace: profsym, literals: [tokens=` + e2eUploadToken + `]}
  - {name: profsym-read-token, namespace: profsym, literals: [token=` + e2eReadToken + `]}
  # MinIO's root credentials (deploy/k8s/minio) are the symbolizer's S3 keys.
  - {name: profsym-s3, namespace: profsym, literals: [access-key=profsym-dev, secret-key=profsym-dev-secret]}
  - {name: profsym-redis, namespace: profsym, literals: [password=` + e2eRedisPassword + `]}
  - {name: redis-config, namespace: profsym, files: [redis.conf]}
  - {name: profsym-ca, namespace: profsym, files: [ca.crt]}
  - {name: profsym-ca, namespace: profsym-collector, files: [ca.crt]}
  - {name: symbolizer-tls, namespace: profsym, type: kubernetes.io/tls, files: [tls.crt=symbolizer.crt, tls.key=symbolizer.key]}
  - {name: gateway-tls, namespace: profsym, type: kubernetes.io/tls, files: [tls.crt=gateway.crt, tls.key=gateway.key]}
  - {name: collector-tls, namespace: profsym-collector, type: kubernetes.io/tls, files: [tls.crt=collector.crt, tls.key=collector.key]}
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: minio, namespace: profsym}
      spec:
        template:
          spec:
            volumes:
              - name: data
                emptyDir: null
                persistentVolumeClaim: {claimName: minio-data}
`

// overlayKustomization is the operator's overlay over deploy/k8s/overlays/production. %[1]s is
// the relative path to the repository's deploy/k8s.
const overlayKustomization = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %[1]s/overlays/production
patches:
  # The store and the cache of this cluster: MinIO in plain HTTP in its default region (by the
  # Service's full name: upload clients in other namespaces PUT to it), the bucket created at
  # the symbolizer's start, the Redis of the store.
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: symbolizer, namespace: profsym}
      spec:
        template:
          spec:
            containers:
              - name: symbolizer
                env:
                  - {name: SYMBOLIZER_S3_ENDPOINT, value: "minio.profsym.svc:9000"}
                  - {name: SYMBOLIZER_S3_REGION, value: us-east-1}
                  - {name: SYMBOLIZER_S3_INSECURE, value: "true"}
                  - {name: SYMBOLIZER_S3_CREATE_BUCKET, value: "true"}
                  - {name: SYMBOLIZER_REDIS_URL, value: "redis://redis:6380/0"}
  - patch: |-
      apiVersion: v1
      kind: Service
      metadata: {name: symbolizer, namespace: profsym}
      spec:
        clusterIP: ` + symbolizerServiceIP + `
  # One replica of each Deployment: the node has two cores.
  - target: {kind: HorizontalPodAutoscaler}
    patch: |-
      - {op: replace, path: /spec/minReplicas, value: 1}
      - {op: replace, path: /spec/maxReplicas, value: 1}
`

// writeProductionOverlay writes the operator's two kustomizations into dir: store (Secrets,
// MinIO, Redis) and overlay (the production overlay pointed at them). It returns the PEM of the
// CA that signed the certificates and the folder of MinIO's PersistentVolume.
func writeProductionOverlay(t *testing.T, root, dir string) ([]byte, string) {
	t.Helper()
	k8s := filepath.Join(root, "deploy", "k8s")
	for _, d := range []string{"store", "overlay"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rel := func(d string) string {
		r, err := filepath.Rel(filepath.Join(dir, d), k8s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	data := t.TempDir()
	// MinIO runs as 1000:1000; a hostPath volume is not chowned to the pod's fsGroup.
	if err := os.Chmod(data, 0o777); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"overlay/kustomization.yaml": fmt.Appendf(nil, overlayKustomization, rel("overlay")),
		"store/kustomization.yaml":   fmt.Appendf(nil, storeKustomization, rel("store")),
		"store/store.yaml":           fmt.Appendf(nil, storeManifests, data),
		"store/redis.conf":           []byte("port 6380\nrequirepass " + e2eRedisPassword + "\nsave \"\"\nappendonly no\nprotected-mode no\nmaxmemory 128mb\nmaxmemory-policy allkeys-lru\n"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "profsym e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	files["store/ca.crt"] = caPEM
	// The names docs/operations.md asks for, the headless Service the gateway's affinity router
	// resolves, and the Service address the test dials.
	for i, name := range []string{"symbolizer", "gateway", "collector"} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames:    []string{name, name + ".profsym.svc", name + ".profsym.svc.cluster.local"},
		}
		if name == "symbolizer" {
			tmpl.DNSNames = append(tmpl.DNSNames, "symbolizer-headless", "symbolizer-headless.profsym.svc")
			tmpl.IPAddresses = []net.IP{net.ParseIP(symbolizerServiceIP)}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		files["store/"+name+".crt"] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		files["store/"+name+".key"] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caPEM, data
}

// checkPolicySelectors: the API server accepted the overlay's NetworkPolicies (they exist), each
// selects the pods it is named for, and every peer that names pods (a podSelector, with or
// without a namespaceSelector) matches at least one running pod; peers that name only a
// namespace label an operator sets (metrics scrapers, upload clients) match none here.
func checkPolicySelectors(ctx context.Context, t *testing.T, client *kubernetes.Clientset) {
	want := map[string][]string{ // namespace -> policies, each selecting the pods of its name
		"profsym":           {"gateway", "symbolizer", "minio"},
		"profsym-collector": {"collector"},
	}
	for ns, names := range want {
		pols, err := client.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]networkingv1.NetworkPolicy{}
		for _, p := range pols.Items {
			have[p.Name] = p
		}
		for _, name := range names {
			p, ok := have[name]
			if !ok {
				t.Errorf("NetworkPolicy %s/%s is not in the cluster", ns, name)
				continue
			}
			pods := selectedPods(ctx, t, client, []string{ns}, &p.Spec.PodSelector)
			if len(pods) == 0 || !allNamed(pods, name) {
				t.Errorf("NetworkPolicy %s/%s selects %q, want the %s pods", ns, name, podNames(pods), name)
			}
			var peers []networkingv1.NetworkPolicyPeer
			for _, r := range p.Spec.Ingress {
				peers = append(peers, r.From...)
			}
			for _, r := range p.Spec.Egress {
				peers = append(peers, r.To...)
			}
			for _, peer := range peers {
				if peer.PodSelector == nil {
					continue
				}
				namespaces := []string{ns}
				if peer.NamespaceSelector != nil {
					namespaces = selectedNamespaces(ctx, t, client, peer.NamespaceSelector)
				}
				if got := selectedPods(ctx, t, client, namespaces, peer.PodSelector); len(got) == 0 {
					t.Errorf("NetworkPolicy %s/%s: peer %s in namespaces %q selects no pod", ns, name, metav1.FormatLabelSelector(peer.PodSelector), namespaces)
				} else {
					t.Logf("NetworkPolicy %s/%s: peer %s selects %q", ns, name, metav1.FormatLabelSelector(peer.PodSelector), podNames(got))
				}
			}
		}
	}
}

func selectedPods(ctx context.Context, t *testing.T, client *kubernetes.Clientset, namespaces []string, sel *metav1.LabelSelector) []corev1.Pod {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, ns := range namespaces {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pods.Items...)
	}
	return out
}

func selectedNamespaces(ctx context.Context, t *testing.T, client *kubernetes.Clientset, sel *metav1.LabelSelector) []string {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	nss, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nss.Items {
		if s.Matches(labels.Set(n.Labels)) {
			out = append(out, n.Name)
		}
	}
	return out
}

func allNamed(pods []corev1.Pod, app string) bool {
	for _, p := range pods {
		if p.Labels["app.kubernetes.io/name"] != app {
			return false
		}
	}
	return true
}

func podNames(pods []corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	return names
}

// roundTripSource is the program uploaded and symbolized: a function that is not inlined, so
// that its symbol's address resolves to it.
const roundTripSource = `#include <stdio.h>
__attribute__((noinline)) int kustomize_round_trip(int x) { return x * 3 + 1; }
int main(int argc, char **argv) { (void)argv; printf("%d\n", kustomize_round_trip(argc)); return 0; }
`

// uploaderPod uploads a binary to the symbolizer as a CI runner in the cluster does: a pod of
// the symbolizer's image running `symbolizer upload` in a namespace labelled as an upload
// client (the symbolizer's NetworkPolicy admits such namespaces), with the upload token, the CA
// and the binary from a ConfigMap. The client PUTs the file to the object store at the
// presigned URL the symbolizer hands out, so it must reach the store's endpoint as the
// symbolizer names it. %[1]s is the binary's base64, %[2]s the CA's PEM, indented.
const uploaderPod = `apiVersion: v1
kind: Namespace
metadata:
  name: ci-upload
  labels:
    profsym.dev/upload-client: "true"
    pod-security.kubernetes.io/enforce: restricted
---
apiVersion: v1
kind: ConfigMap
metadata: {name: upload-input, namespace: ci-upload}
binaryData:
  roundtrip: %[1]s
data:
  ca.crt: |
%[2]s
---
apiVersion: v1
kind: Pod
metadata: {name: uploader, namespace: ci-upload}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    seccompProfile: {type: RuntimeDefault}
  containers:
    - name: upload
      image: ghcr.io/profsym/symbolizer:0.1.0
      imagePullPolicy: Never
      args: [upload, --server, "https://symbolizer.profsym.svc:7070", --progress, plain, /input/roundtrip]
      env:
        - {name: SYMBOLIZER_TOKEN, value: ` + e2eUploadToken + `}
        - {name: SSL_CERT_FILE, value: /input/ca.crt}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: [ALL]}
      volumeMounts:
        - {name: input, mountPath: /input, readOnly: true}
        - {name: tmp, mountPath: /tmp}
  volumes:
    - name: input
      configMap: {name: upload-input}
    - name: tmp
      emptyDir: {sizeLimit: 64Mi}
`

// checkUploadSymbolize builds a small C program, uploads it from a pod with `symbolizer upload`
// to the symbolizer Service over TLS (the upload token; the object goes to MinIO on its
// PersistentVolume), and asks Symbolize over TLS (the read token) for its function's address:
// the answer must name the function and its source file.
func checkUploadSymbolize(ctx context.Context, t *testing.T, c *cluster.Cluster, client *kubernetes.Clientset, ca []byte) {
	dir := t.TempDir()
	src := filepath.Join(dir, "roundtrip.c")
	if err := os.WriteFile(src, []byte(roundTripSource), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "roundtrip")
	if out, err := exec.CommandContext(ctx, "gcc", "-O1", "-g", "-Wl,--build-id", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	buildID, addr := buildIDAndSymbol(t, bin, "kustomize_round_trip")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	caLines := strings.Split(strings.TrimSpace(string(ca)), "\n")
	for i := range caLines {
		caLines[i] = "    " + caLines[i]
	}
	manifest := fmt.Sprintf(uploaderPod, base64.StdEncoding.EncodeToString(data), strings.Join(caLines, "\n"))
	if out, err := c.Kubectl(ctx, []byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply (the uploader pod): %v\n%s", err, out)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		p, err := client.CoreV1().Pods("ci-upload").Get(ctx, "uploader", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			logs, _ := c.Kubectl(ctx, nil, "logs", "-n", "ci-upload", "uploader")
			if p.Status.Phase == corev1.PodFailed {
				t.Fatalf("symbolizer upload in a pod failed:\n%s", logs)
			}
			t.Logf("symbolizer upload in a pod: %s", strings.TrimSpace(string(logs)))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the uploader pod is %s after 3m: %s", p.Status.Phase, podState(p))
		}
		time.Sleep(time.Second)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{
		Timeout: 30 * time.Second,
		Transport: &bearer{token: e2eReadToken, next: &http.Transport{
			DialContext:     c.Dialer().DialContext,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}},
	}
	sc := symbolizerv1connect.NewSymbolizerServiceClient(hc, "https://"+symbolizerServiceIP+":7070")
	resp, err := sc.Symbolize(ctx, connect.NewRequest(&symbolizerv1.SymbolizeRequest{Modules: []*symbolizerv1.Module{{GnuBuildId: buildID, Addresses: []uint64{addr}}}}))
	if err != nil {
		t.Fatalf("Symbolize over TLS: %v", err)
	}
	m := resp.Msg.Modules[0]
	if m.Status != symbolizerv1.ModuleStatus_MODULE_STATUS_OK || len(m.FrameCounts) != 1 || m.FrameCounts[0] == 0 {
		t.Fatalf("Symbolize %s at %#x: status %v (%s), frames %v", buildID, addr, m.Status, m.Message, m.FrameCounts)
	}
	fn := m.Strings[m.Frames.FunctionNames[0]]
	file := m.Strings[m.Frames.Files[0]]
	if fn != "kustomize_round_trip" || !strings.HasSuffix(file, "roundtrip.c") {
		t.Errorf("Symbolize %s at %#x: %s in %s, want kustomize_round_trip in roundtrip.c", buildID, addr, fn, file)
	}
	t.Logf("Symbolize %s at %#x over TLS: %s at %s:%d", buildID, addr, fn, file, m.Frames.Lines[0])
}

// bearer adds the read token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// buildIDAndSymbol returns the GNU build ID of an ELF file and the address of a function symbol.
func buildIDAndSymbol(t *testing.T, path, symbol string) (string, uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	note := f.Section(".note.gnu.build-id")
	if note == nil {
		t.Fatalf("%s: no .note.gnu.build-id", path)
	}
	b, err := note.Data()
	if err != nil || len(b) < 16 {
		t.Fatalf("%s: build ID note: %v", path, err)
	}
	namesz, descsz := binary.LittleEndian.Uint32(b[0:4]), binary.LittleEndian.Uint32(b[4:8])
	off := 12 + (namesz+3)&^3
	if int(off+descsz) > len(b) {
		t.Fatalf("%s: build ID note truncated", path)
	}
	id := hex.EncodeToString(b[off : off+descsz])
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == symbol && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return id, s.Value
		}
	}
	t.Fatalf("%s: no function %s", path, symbol)
	return "", 0
}

// checkGatewayReceives waits until the gateway's receiver has accepted profiles (its /metrics,
// read at the pod's address): the collector sends them to gateway.profsym.svc:4317 with its
// client certificate, which the gateway's receiver requires (mutual TLS).
func checkGatewayReceives(ctx context.Context, t *testing.T, c *cluster.Cluster, client *kubernetes.Clientset) {
	gws, err := client.CoreV1().Pods("profsym").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gateway"})
	if err != nil || len(gws.Items) != 1 {
		t.Fatalf("gateway pods: %v (%d)", err, len(gws.Items))
	}
	url := "http://" + net.JoinHostPort(gws.Items[0].Status.PodIP, "8888") + "/metrics"
	hc := c.HTTPClient()
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		n, line, err := acceptedProfiles(ctx, hc, url)
		if err != nil {
			last = err.Error()
		} else if n > 0 {
			t.Logf("the gateway accepted profiles from the collector over mutual TLS: %s", line)
			return
		} else {
			last = line
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("the gateway accepted no profile in 3m (%s)", last)
}

// acceptedProfiles sums the receiver's accepted-profile counters of a Collector's /metrics.
func acceptedProfiles(ctx context.Context, hc *http.Client, url string) (float64, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var sum float64
	var lines []string
	for _, l := range bytes.Split(body, []byte("\n")) {
		s := string(l)
		if !strings.HasPrefix(s, "otelcol_receiver_accepted_") || !strings.Contains(s, "profile") {
			continue
		}
		f := strings.Fields(s)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		sum += v
		lines = append(lines, s)
	}
	if len(lines) == 0 {
		return 0, "", errors.New("no otelcol_receiver_accepted_*profile* metric yet")
	}
	return sum, strings.Join(lines, "; "), nil
}
