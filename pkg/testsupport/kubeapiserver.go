package testsupport

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/profsym/profsym/pkg/freeport"
)

// KubeVersion is the kube-apiserver the deploy tests validate against; .ci/build-kube-apiserver
// builds the same version.
const KubeVersion = "v1.36.3"

// ErrToolMissing marks a start that failed because a binary is not installed (as opposed to
// one that is installed and does not work).
var ErrToolMissing = errors.New("tool missing")

// KubeAPIServer is a real kube-apiserver on a loopback port, backed by Debian's etcd on
// another, for server-side dry runs: validation, defaulting and admission (PodSecurity among
// it) exactly as a cluster runs them, with no nodes and no controllers.
//
// Unlike the other servers of this package it is not tied to one test: a test package starts
// it once in TestMain (it takes seconds) and calls Stop after m.Run.
type KubeAPIServer struct {
	// URL is the https base URL; Token a bearer token of a system:masters user.
	URL   string
	Token string

	dir   string
	procs []*exec.Cmd
	logs  []string
}

// KubeAPIServerBinary finds the kube-apiserver .ci/install-deps builds: $PROFSYM_KUBE_APISERVER,
// the tools directory, then PATH. The error wraps ErrToolMissing when there is none.
func KubeAPIServerBinary() (string, error) {
	if path := os.Getenv("PROFSYM_KUBE_APISERVER"); path != "" {
		return path, nil
	}
	if dir := toolsDir(); dir != "" {
		path := filepath.Join(dir, "kube-apiserver")
		if ok, err := isExecutable(path); err != nil {
			return "", err
		} else if ok {
			return path, nil
		}
	}
	if path, err := exec.LookPath("kube-apiserver"); err == nil {
		return path, nil
	}
	return "", fmt.Errorf("%w: kube-apiserver %s (run .ci/install-deps, which builds it from the Go module proxy)", ErrToolMissing, KubeVersion)
}

// StartKubeAPIServer starts etcd and kube-apiserver in a new directory under dir and waits
// until the API server is ready. On error nothing is left running.
func StartKubeAPIServer(dir string) (_ *KubeAPIServer, err error) {
	apiserver, err := KubeAPIServerBinary()
	if err != nil {
		return nil, err
	}
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("%w: etcd (apt-get install -y etcd-server, or run .ci/install-deps)", ErrToolMissing)
	}
	if dir, err = os.MkdirTemp(dir, "kube-apiserver-"); err != nil {
		return nil, fmt.Errorf("kube-apiserver directory: %w", err)
	}
	k := &KubeAPIServer{dir: dir}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, k.tails())
			k.Stop()
		}
	}()
	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	k.Token = token
	if err := k.writeFiles(); err != nil {
		return nil, err
	}

	ports, err := freeport.Ports(3)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	if err := k.start(etcd, "etcd",
		"--name=test", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls=http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-advertise-peer-urls=http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-cluster=test=http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--log-level=warn",
	); err != nil {
		return nil, err
	}
	if err := waitHTTP(context.Background(), etcdURL+"/health", "", 30*time.Second, k.exited); err != nil {
		return nil, fmt.Errorf("etcd not ready: %w", err)
	}

	k.URL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	if err := k.start(apiserver, "kube-apiserver",
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[2]),
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		// No controllers run here, so no ServiceAccount is ever created for a dry-run pod.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
	); err != nil {
		return nil, err
	}
	if err := waitHTTP(context.Background(), k.URL+"/readyz", k.Token, 90*time.Second, k.exited); err != nil {
		return nil, fmt.Errorf("kube-apiserver not ready: %w", err)
	}
	return k, nil
}

func (k *KubeAPIServer) writeFiles() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(k.dir, "sa.key"), keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(k.dir, "tokens.csv"), []byte(k.Token+",admin,admin,system:masters\n"), 0o600)
}

func (k *KubeAPIServer) start(bin, name string, args ...string) error {
	logPath := filepath.Join(k.dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	// It outlives any one test's context: Stop ends it.
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Dir = k.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	k.procs = append(k.procs, cmd)
	k.logs = append(k.logs, logPath)
	go func() { _ = cmd.Wait() }()
	return nil
}

// exited reports a child that is no longer running, so a failed start is not waited out.
func (k *KubeAPIServer) exited() error {
	for _, p := range k.procs {
		if err := syscall.Kill(p.Process.Pid, 0); err != nil {
			return fmt.Errorf("%s exited", filepath.Base(p.Path))
		}
	}
	return nil
}

func (k *KubeAPIServer) tails() string {
	var b strings.Builder
	for _, l := range k.logs {
		fmt.Fprintf(&b, "last %d lines of %s:\n%s\n", logTailLines, filepath.Base(l), tailFile(l, logTailLines))
	}
	return b.String()
}

// Stop stops the API server, then etcd, and removes their directory.
func (k *KubeAPIServer) Stop() {
	for i := len(k.procs) - 1; i >= 0; i-- {
		p := k.procs[i]
		_ = signalGroup(p.Process.Pid, syscall.SIGTERM)
		deadline := time.Now().Add(stopGrace)
		for time.Now().Before(deadline) && syscall.Kill(p.Process.Pid, 0) == nil {
			time.Sleep(pollInterval)
		}
		_ = signalGroup(p.Process.Pid, syscall.SIGKILL)
	}
	k.procs = nil
	_ = os.RemoveAll(k.dir)
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return fmt.Sprintf("%x", b), nil
}

// waitHTTP polls url until it answers 200, a child exits, or timeout passes.
func waitHTTP(ctx context.Context, url, token string, timeout time.Duration, exited func() error) error {
	// The API server's certificate is self-signed in its cert dir; the tests trust the token,
	// not the network (loopback).
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		if err := exited(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s: not ready after %v (last: %s)", url, timeout, last)
}
