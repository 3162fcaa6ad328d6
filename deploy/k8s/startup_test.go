package k8s_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/profsym/profsym/pkg/testsupport"
)

// TestContainersStartAsRendered starts every profsym container of every overlay with exactly
// its rendered args and env and waits for its readiness probe to pass. A server-side dry run
// accepts a Deployment whose binary exits at start (the production gateway once had no
// exporter); only running it finds that.
//
// What a cluster would provide is stood in for, and nothing else is changed: Secrets get test
// values (real certificates from a test CA, the test MinIO's keys, the test Redis's password);
// volume mounts are directories under a temporary root, and each mount path in args and env is
// rewritten to it; listen ports become free loopback ports; the object store and Redis named by
// the manifests are replaced by real MinIO and Redis (endpoints, region, plain HTTP to MinIO).
func TestContainersStartAsRendered(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MinIO, Redis and every service")
	}
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			startAll(t, build(t, overlay).objs)
		})
	}
}

// cluster holds the stand-ins for what a cluster gives the pods.
type cluster struct {
	sink     *backendSink // the OTLP backend of the production renderings
	minio    *testsupport.MinIO
	redis    *testsupport.Redis
	secrets  map[string]map[string]string // Secret name -> key -> test value
	replace  []string                     // old, new pairs applied to every arg and env value
	extraEnv map[string][]string          // container -> NAME=value added for stand-ins
}

const testRedisPassword = "test-redis-password"

// testReadToken stands in for the profsym-read-token Secret.
const testReadToken = "test-read-token"

func newCluster(t *testing.T) *cluster {
	t.Helper()
	m := testsupport.StartMinIO(t)
	for _, bucket := range []string{"profsym-debuginfo"} {
		m.NewBucket(t, bucket)
	}
	// The production Redis wants a password (from the profsym-redis Secret); dev's has none.
	rd := testsupport.StartRedisWithPassword(t, testRedisPassword)
	devRedis := testsupport.StartRedis(t)
	ca, pki := newPKI(t)
	sink := startBackendSink(t)
	s3 := map[string]string{"access-key": m.AccessKey(), "secret-key": m.SecretKey()}
	c := &cluster{
		minio: m, redis: rd, sink: sink,
		secrets: map[string]map[string]string{
			"profsym-upload-tokens": {"tokens": "test-upload-token\n"},
			"profsym-upload-token":  {"token": "test-upload-token\n"},
			"profsym-read-token":    {"token": testReadToken + "\n"},
			"profsym-tenants":       {"tenants": "team-a upload test-tenant-token\nteam-a quota uploads-per-day=10\n"},
			"profsym-s3":            s3,
			"minio-credentials":     s3,
			"profsym-redis":         {"password": testRedisPassword},
			"profsym-ca":            {"ca.crt": ca},
			"symbolizer-tls":        pki("symbolizer"),
			"gateway-tls":           pki("gateway"),
			"collector-tls":         pki("collector"),
		},
		replace: []string{
			"minio.profsym.svc:9000", m.Endpoint(),
			"s3.eu-west-1.amazonaws.com", m.Endpoint(),
			"redis://redis:6379/0", devRedis.URL(),
			"redis://profsym-redis:6379/0", devRedis.URL(),
			"rediss://redis.example.internal:6380/0", "redis://" + rd.Addr() + "/0",
			"otel-collector.observability.svc:4317", sink.addr,
		},
		extraEnv: map[string][]string{
			// The test MinIO speaks plain HTTP in its default region.
			"symbolizer": {"SYMBOLIZER_S3_INSECURE=true", "SYMBOLIZER_S3_REGION=" + m.Region()},
		},
	}
	return c
}

// startAll starts every profsym container among objs, one after the other (two shared cores).
func startAll(t *testing.T, objs []runtime.Object) {
	t.Helper()
	c := newCluster(t)
	configMaps := map[string]map[string]string{}
	secrets := map[string]map[string]string{}
	for _, o := range objs {
		switch x := o.(type) {
		case *corev1.ConfigMap:
			configMaps[x.Name] = x.Data
		case *corev1.Secret:
			m := map[string]string{}
			for k, v := range x.StringData {
				m[k] = v
			}
			for k, v := range x.Data {
				m[k] = string(v)
			}
			secrets[x.Name] = m
		}
	}
	for name, kv := range c.secrets {
		secrets[name] = kv
	}
	started := 0
	for _, w := range workloads(rendered{objs: objs}) {
		for _, ctr := range w.pod.Spec.Containers {
			if _, ours := served[ctr.Name]; !ours {
				continue
			}
			t.Run(w.name, func(t *testing.T) {
				if w.pod.Spec.HostPID && os.Geteuid() != 0 {
					requireOrSkip(t, "root (the collector loads eBPF programs)")
				}
				startContainer(t, c, w, ctr, configMaps, secrets, objs)
			})
			started++
		}
	}
	if started == 0 {
		t.Fatal("no profsym container in the rendered manifests")
	}
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// startContainer runs ctr as its rendering says until its readiness probe answers. A free
// loopback port can be taken by another process between the test choosing it and the service
// binding it; a start that fails that way is tried again with other ports.
func startContainer(t *testing.T, c *cluster, w workload, ctr corev1.Container, configMaps, secrets map[string]map[string]string, objs []runtime.Object) {
	t.Helper()
	const attempts = 3
	for i := 1; ; i++ {
		if !startContainerOnce(t, c, w, ctr, configMaps, secrets, objs, i < attempts) {
			return
		}
		t.Logf("%s: a chosen port was taken before the service bound it; trying again with other ports", ctr.Name)
	}
}

// startContainerOnce is one start of startContainer. It reports true, having failed nothing,
// when the service exited because a listen address was in use and mayRetry is set.
func startContainerOnce(t *testing.T, c *cluster, w workload, ctr corev1.Container, configMaps, secrets map[string]map[string]string, objs []runtime.Object, mayRetry bool) (retry bool) {
	t.Helper()
	root := t.TempDir()
	ports := map[int32]int{} // containerPort -> loopback port
	for _, p := range ctr.Ports {
		ports[p.ContainerPort] = testsupport.FreePort(t)
	}
	type configFile struct{ path, content string }
	var configFiles []configFile
	// Mount paths, longest first so /etc/profsym/ca is not rewritten as a prefix of another.
	mounts := map[string]string{}
	var mountPaths []string
	volumes := map[string]corev1.Volume{}
	for _, v := range w.pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	for _, vm := range ctr.VolumeMounts {
		dir := filepath.Join(root, vm.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		v, ok := volumes[vm.Name]
		if !ok {
			t.Fatalf("%s: volume mount %s names no volume", ctr.Name, vm.Name)
		}
		if v.Secret != nil {
			data, ok := secrets[v.Secret.SecretName]
			if !ok {
				t.Fatalf("%s: Secret %s has no test value", ctr.Name, v.Secret.SecretName)
			}
			files := map[string]string{}
			if len(v.Secret.Items) == 0 {
				for k := range data {
					files[k] = k
				}
			}
			for _, it := range v.Secret.Items {
				files[it.Key] = it.Path
			}
			for key, path := range files {
				val, ok := data[key]
				if !ok {
					t.Fatalf("%s: Secret %s has no key %s", ctr.Name, v.Secret.SecretName, key)
				}
				if err := os.WriteFile(filepath.Join(dir, path), []byte(val), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		if v.ConfigMap != nil {
			data, ok := configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("%s: ConfigMap %s is not in the rendering", ctr.Name, v.ConfigMap.Name)
			}
			files := map[string]string{}
			if len(v.ConfigMap.Items) == 0 {
				for k := range data {
					files[k] = k
				}
			}
			for _, it := range v.ConfigMap.Items {
				files[it.Key] = it.Path
			}
			for key, path := range files {
				val, ok := data[key]
				if !ok {
					t.Fatalf("%s: ConfigMap %s has no key %s", ctr.Name, v.ConfigMap.Name, key)
				}
				// Written once the rewriting below is known: configurations name listen
				// addresses and mounted files too.
				configFiles = append(configFiles, configFile{filepath.Join(dir, path), val})
			}
		}
		mounts[vm.MountPath] = dir
		mountPaths = append(mountPaths, vm.MountPath)
	}
	slices.SortFunc(mountPaths, func(a, b string) int { return len(b) - len(a) })
	// One pass: the temporary root is itself under /tmp, a mount path of its own.
	var pairs []string
	for _, mp := range mountPaths {
		pairs = append(pairs, mp, mounts[mp])
	}
	mountRewriter := strings.NewReplacer(pairs...)

	listen := regexp.MustCompile(`^(--[a-z-]+=)?:(\d+)$`)
	rewrite := func(s string) string {
		for i := 0; i+1 < len(c.replace); i += 2 {
			s = strings.ReplaceAll(s, c.replace[i], c.replace[i+1])
		}
		if m := listen.FindStringSubmatch(s); m != nil {
			n, _ := strconv.Atoi(m[2])
			p, ok := ports[int32(n)]
			if !ok {
				p = testsupport.FreePort(t)
			}
			return m[1] + "127.0.0.1:" + strconv.Itoa(p)
		}
		return mountRewriter.Replace(s)
	}
	// In a mounted configuration (the gateway's Collector YAML): listen addresses on every
	// interface become the loopback ports of their container ports, as in args; mount paths as
	// in args.
	anyHost := regexp.MustCompile(`0\.0\.0\.0:(\d+)`)
	portKey := regexp.MustCompile(`(?m)^(\s*port:\s*)(\d+)\s*$`)
	mapPort := func(n string) string {
		i, _ := strconv.Atoi(n)
		p, ok := ports[int32(i)]
		if !ok {
			p = testsupport.FreePort(t)
		}
		return strconv.Itoa(p)
	}
	for _, f := range configFiles {
		s := f.content
		for i := 0; i+1 < len(c.replace); i += 2 {
			s = strings.ReplaceAll(s, c.replace[i], c.replace[i+1])
		}
		s = anyHost.ReplaceAllStringFunc(s, func(m string) string { return "127.0.0.1:" + mapPort(m[len("0.0.0.0:"):]) })
		s = portKey.ReplaceAllStringFunc(s, func(m string) string {
			sub := portKey.FindStringSubmatch(m)
			return sub[1] + mapPort(sub[2])
		})
		s = strings.ReplaceAll(s, "host: 0.0.0.0", "host: 127.0.0.1")
		s = mountRewriter.Replace(s)
		if err := os.WriteFile(f.path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	env := map[string]string{}
	var envList []string
	for _, e := range ctr.Env {
		var val string
		switch {
		case e.ValueFrom == nil:
			val = envRef.ReplaceAllStringFunc(e.Value, func(ref string) string { return env[ref[2:len(ref)-1]] })
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := configMaps[ref.Name][ref.Key]
			if !ok {
				t.Fatalf("%s: env %s: ConfigMap %s has no key %s", ctr.Name, e.Name, ref.Name, ref.Key)
			}
			val = v
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secrets[ref.Name][ref.Key]
			if !ok {
				t.Fatalf("%s: env %s: Secret %s has no test value for key %s", ctr.Name, e.Name, ref.Name, ref.Key)
			}
			val = v
		case e.ValueFrom.FieldRef != nil:
			val = "test-" + strings.ReplaceAll(e.ValueFrom.FieldRef.FieldPath, ".", "-")
		default:
			t.Fatalf("%s: env %s: a valueFrom this test does not know", ctr.Name, e.Name)
		}
		val = rewrite(val)
		env[e.Name] = val
		envList = append(envList, e.Name+"="+val)
	}
	envList = append(envList, c.extraEnv[ctr.Name]...)
	args := make([]string, len(ctr.Args))
	for i, a := range ctr.Args {
		// Kubernetes expands $(VAR) in args from the container's env.
		a = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := env[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		})
		args[i] = rewrite(a)
	}
	if len(ctr.Command) > 0 {
		t.Fatalf("%s: a command overrides the image's entrypoint; this test runs the service binary", ctr.Name)
	}

	bin := serviceBinary(t, ctr.Name)
	cmd := exec.CommandContext(t.Context(), bin, args...)
	// A container's environment is its env and nothing of the node's, except where the test
	// needs PATH-free tools: none do.
	cmd.Env = append([]string{"HOME=" + root, "TMPDIR=" + filepath.Join(root, "tmp")}, envList...)
	automount := w.pod.Spec.AutomountServiceAccountToken != nil && *w.pod.Spec.AutomountServiceAccountToken
	if automount {
		// The pod reads the Kubernetes API with its service account (incluster_test.go).
		kenv, saDir := inCluster(t, w, objs)
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.CommandContext(t.Context(), self, append([]string{bin}, args...)...)
		cmd.Env = append([]string{"HOME=" + root, "TMPDIR=" + filepath.Join(root, "tmp"), inClusterEnv + "=" + saDir}, envList...)
		cmd.Env = append(cmd.Env, kenv...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	}
	cmd.Dir = root
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out testsupport.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: start %s: %v", ctr.Name, bin, err)
	}
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() { exited <- cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})

	probe := ctr.ReadinessProbe
	if probe == nil || probe.HTTPGet == nil {
		t.Fatalf("%s: no HTTP readiness probe to wait for", ctr.Name)
	}
	port := probe.HTTPGet.Port.IntVal
	for _, p := range ctr.Ports {
		if p.Name == probe.HTTPGet.Port.StrVal {
			port = p.ContainerPort
		}
	}
	scheme := strings.ToLower(string(probe.HTTPGet.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	url := fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, ports[port], probe.HTTPGet.Path)
	// The kubelet does not verify a probe's certificate either.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		select {
		case err := <-exited:
			if mayRetry && strings.Contains(out.String(), "address already in use") {
				return true
			}
			t.Fatalf("%s (%s/%s) exited before it was ready: %v\nargs: %q\noutput:\n%s", ctr.Name, w.kind, w.name, err, args, out.String())
		default:
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (%s/%s) not ready at %s after 60s (last: %s)\nargs: %q\noutput:\n%s", ctr.Name, w.kind, w.name, url, last, args, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s ready at %s", ctr.Name, url)
	if automount {
		checkAccess(t, w)
		// The pod informer lists and watches at start; a right the RBAC lacks shows here.
		time.Sleep(time.Second)
		if o := out.String(); strings.Contains(strings.ToLower(o), "forbidden") || strings.Contains(o, "Unauthorized") {
			t.Errorf("%s: the Kubernetes API refused the service account's requests:\n%s", ctr.Name, o)
		}
		if ctr.Name == "gateway" {
			var cfgPath string
			for _, a := range args {
				if p, ok := strings.CutPrefix(a, "--config="); ok {
					cfgPath = p
				}
			}
			checkK8sNames(t, c, cfgPath, fmt.Sprintf("127.0.0.1:%d", ports[4317]))
			if t.Failed() {
				t.Logf("gateway output:\n%s", out.String())
			}
		}
	}
	if ctr.Name == "symbolizer" {
		checkSymbolizerGuards(t, hc, fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[port]), ctr, ports)
	}
	if ctr.Name == "symbolizer" && strings.Contains(out.String(), "redis does not answer") {
		t.Errorf("symbolizer could not use Redis with the rendered settings (password file, URL):\n%s", out.String())
	}
	return false
}

// serviceBinary builds a service as its Dockerfile does, once per test binary.
func serviceBinary(t *testing.T, service string) string {
	t.Helper()
	helpOf(t, service, nil)
	binMu.Lock()
	defer binMu.Unlock()
	return bins[service]
}

// newPKI makes a CA and returns its PEM with a function that issues a certificate (for the
// Service names of name and 127.0.0.1; server and client use) as a kubernetes.io/tls Secret's
// data.
func newPKI(t *testing.T) (string, func(name string) map[string]string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "profsym-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	var serial int64 = 1
	issue := func(name string) map[string]string {
		serial++
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			DNSNames:    []string{name, name + ".profsym.svc"},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{
			"tls.crt": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
			"tls.key": string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
		}
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})), issue
}

// requireOrSkip skips a test whose prerequisite is missing on a developer's machine, and fails
// it under CI (CI set): a pipeline must not pass by skipping what it is there to run.
func requireOrSkip(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is required under CI; .ci/install-deps installs every tool the deploy tests use", what)
	}
	t.Skipf("%s is missing (run .ci/install-deps); under CI this fails", what)
}

// checkSymbolizerGuards: as rendered, the symbolizer hands out no stored binary without the read
// token, accepts the token of the profsym-read-token Secret, and serves /metrics to a scraper
// without a token on its metrics port.
func checkSymbolizerGuards(t *testing.T, hc *http.Client, api string, ctr corev1.Container, ports map[int32]int) {
	t.Helper()
	get := func(url, tok string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	path := api + "/buildid/0123456789abcdef0123456789abcdef01234567/executable"
	if code := get(path, ""); code != http.StatusUnauthorized {
		t.Errorf("symbolizer: a debuginfod read without a token answered %d, want 401 (reads must be guarded)", code)
	}
	if code := get(path, testReadToken); code != http.StatusNotFound {
		t.Errorf("symbolizer: a debuginfod read with the read token answered %d, want 404", code)
	}
	var metricsPort int32
	for _, p := range ctr.Ports {
		if p.Name == "metrics" {
			metricsPort = p.ContainerPort
		}
	}
	if metricsPort == 0 {
		t.Errorf("symbolizer: no metrics port")
		return
	}
	if code := get(fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[metricsPort]), ""); code != http.StatusOK {
		t.Errorf("symbolizer: /metrics on the metrics port answered %d", code)
	}
}
