//go:build linux

package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Versions of what the cluster is built from. KubeVersion is the one .ci/build-kube-apiserver
// builds (all Kubernetes binaries at once); CoreDNSVersion the coredns .ci/install-deps builds.
const (
	KubeVersion    = "v1.36.3"
	CoreDNSVersion = "1.15.0"
)

// The cluster's addresses. They exist only inside its network namespace.
const (
	NodeIP      = "10.200.0.2"
	nodeCIDR    = NodeIP + "/24"
	ServiceCIDR = "10.96.0.0/24"
	// APIServiceIP is the first address of ServiceCIDR: the `kubernetes` Service.
	APIServiceIP = "10.96.0.1"
	// DNSServiceIP is the cluster DNS Service (kube-system/kube-dns), the pods' nameserver.
	DNSServiceIP = "10.96.0.10"
	PodCIDR      = "10.244.0.0/24"
	// NodeName is the one node's name.
	NodeName      = "profsym-node"
	nodeInterface = "node0"
	apiPort       = "6443"
)

// ErrToolMissing marks an Up that failed because a binary is not installed, as opposed to one
// that is installed and does not work: tests skip on it outside CI.
var ErrToolMissing = errors.New("tool missing")

// Config says where a cluster lives.
type Config struct {
	// Dir holds everything of the cluster (certificates, kubeconfigs, etcd, containerd's root
	// and state, the kubelet's root, logs): created if missing, must be empty. Down removes it.
	Dir string
	// Name names the network namespace (/run/netns/Name), the CNI network and the cgroup
	// under which the kubelet puts the pods. Empty: "profsym-" and random letters.
	Name string
	// ToolsDir is where the Kubernetes binaries and coredns are (.ci/install-deps puts them
	// in ~/.cache/profsym/bin, or $PROFSYM_TOOLS). Empty: that default.
	ToolsDir string
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
}

// Cluster is a running single-node cluster. Its exported fields are saved in Dir/state.json,
// so that Load finds a cluster that another process brought up (make cluster-up) and Down
// takes it down.
type Cluster struct {
	// Name is the network namespace's name; NetnsPath its path.
	Name      string `json:"name"`
	NetnsPath string `json:"netnsPath"`
	Dir       string `json:"dir"`
	// Kubeconfig is an administrator's kubeconfig (system:masters). Its server address is
	// reachable only inside the network namespace: use it with `ip netns exec NAME kubectl`,
	// or through RESTConfig in Go.
	Kubeconfig string `json:"kubeconfig"`
	// APIServer is the API server's URL (inside the namespace).
	APIServer string `json:"apiServer"`
	// ContainerdSocket is containerd's socket; images go to its namespace "k8s.io".
	ContainerdSocket string `json:"containerdSocket"`
	// CgroupRoot is the cgroup (in every v1 hierarchy) under which the kubelet creates the
	// pods' cgroups: /<Name>/kubepods/...
	CgroupRoot string `json:"cgroupRoot"`
	// CNINetwork is the CNI network's name.
	CNINetwork string `json:"cniNetwork"`
	// Procs are the daemons, in start order.
	Procs []Proc `json:"procs"`

	tools  map[string]string
	caPEM  []byte
	admin  keyPair
	dialer *Dialer
	log    *slog.Logger
}

// Proc is one daemon of the cluster, the leader of its own process group.
type Proc struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	Log  string `json:"log"`
}

// tool names Up needs, with where a missing one comes from.
var toolHints = map[string]string{
	"kube-apiserver":          "bash .ci/install-deps (builds the Kubernetes binaries from the Go module proxy)",
	"kube-controller-manager": "bash .ci/install-deps",
	"kube-scheduler":          "bash .ci/install-deps",
	"kubelet":                 "bash .ci/install-deps",
	"kube-proxy":              "bash .ci/install-deps",
	"kubectl":                 "bash .ci/install-deps",
	"coredns":                 "bash .ci/install-deps (builds CoreDNS from the Go module proxy)",
	"etcd":                    "apt-get install etcd-server",
	"containerd":              "apt-get install containerd",
	"containerd-shim-runc-v2": "apt-get install containerd",
	"ctr":                     "apt-get install containerd",
	"runc":                    "apt-get install runc",
	"iptables":                "apt-get install iptables",
	"conntrack":               "apt-get install conntrack",
	"ip":                      "apt-get install iproute2",
	"nsenter":                 "apt-get install util-linux",
	"busybox":                 "apt-get install busybox-static",
}

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

// childPath is the PATH of the daemons: containerd finds its shim and runc there, the kubelet
// and kube-proxy iptables, the shims and nsenter.
const childPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// FindTools locates every binary Up runs; the error names each missing one and wraps
// ErrToolMissing.
func FindTools(toolsDir string) (map[string]string, error) {
	if toolsDir == "" {
		toolsDir = DefaultToolsDir()
	}
	found := map[string]string{}
	var missing []string
	for tool, hint := range toolHints {
		path := filepath.Join(toolsDir, tool)
		if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			found[tool] = path
			continue
		}
		if p, err := lookPath(tool); err == nil {
			found[tool] = p
			continue
		}
		missing = append(missing, tool+" ("+hint+")")
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			missing = append(missing, "CNI plugin "+plugin+" (apt-get install containernetworking-plugins)")
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrToolMissing, strings.Join(missing, ", "))
	}
	return found, nil
}

// lookPath looks in the daemons' PATH, which has the sbin directories a user's may lack.
func lookPath(tool string) (string, error) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH") + ":" + childPath) {
		p := filepath.Join(dir, tool)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", tool)
}

// DefaultToolsDir is $PROFSYM_TOOLS, or ~/.cache/profsym/bin.
func DefaultToolsDir() string {
	if dir := os.Getenv("PROFSYM_TOOLS"); dir != "" {
		return dir
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "profsym", "bin")
}

// Up brings a cluster up and returns once its node is Ready and the cluster DNS answers. On
// error everything it started is taken down again. It needs root.
func Up(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("cluster: Up needs root (network namespaces, containerd, the kubelet)")
	}
	tools, err := FindTools(cfg.ToolsDir)
	if err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		return nil, errors.New("cluster: Config.Dir is empty")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster directory: %w", err)
	}
	if entries, err := os.ReadDir(dir); err != nil {
		return nil, err
	} else if len(entries) > 0 {
		return nil, fmt.Errorf("cluster directory %s is not empty (a cluster already up there? take it down with Down or `make cluster-down`)", dir)
	}
	name := cfg.Name
	if name == "" {
		name = "profsym-" + randomLetters(6)
	}
	if _, err := os.Stat(netnsPath(name)); err == nil {
		return nil, fmt.Errorf("network namespace %s exists already", name)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		Name:             name,
		NetnsPath:        netnsPath(name),
		Dir:              dir,
		Kubeconfig:       filepath.Join(dir, "kubeconfig"),
		APIServer:        "https://" + NodeIP + ":" + apiPort,
		ContainerdSocket: filepath.Join(dir, "containerd", "containerd.sock"),
		CgroupRoot:       "/" + name,
		CNINetwork:       name,
		tools:            tools,
		log:              log,
	}
	defer func() {
		if err != nil {
			tails := c.tails()
			if derr := c.Down(context.WithoutCancel(ctx)); derr != nil {
				err = fmt.Errorf("%w (and taking down what was up: %w)", err, derr)
			}
			err = fmt.Errorf("%w\n%s", err, tails)
		}
	}()
	if err := c.save(); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := c.writeFiles(ctx); err != nil {
		return nil, err
	}
	if err := createNetns(ctx, name, nodeCIDR); err != nil {
		return nil, err
	}
	if c.dialer, err = NewDialer(c.NetnsPath); err != nil {
		return nil, err
	}
	if err := createCgroupRoot(c.CgroupRoot); err != nil {
		return nil, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return nil, err
	}
	if err := c.startNode(ctx); err != nil {
		return nil, err
	}
	if err := c.startDNS(ctx); err != nil {
		return nil, err
	}
	log.Info("cluster up", "name", name, "dir", dir, "took", time.Since(start).Round(time.Millisecond))
	return c, nil
}

// Load reads the state of a cluster that Up saved in dir.
func Load(dir string) (*Cluster, error) {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, fmt.Errorf("cluster state: %w", err)
	}
	c := &Cluster{log: slog.New(slog.DiscardHandler)}
	if err := json.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("cluster state %s: %w", filepath.Join(dir, "state.json"), err)
	}
	if c.Dir == "" || c.Name == "" {
		return nil, fmt.Errorf("cluster state %s: no directory or name", filepath.Join(dir, "state.json"))
	}
	if err := c.loadCredentials(); err != nil {
		return nil, err
	}
	if d, err := NewDialer(c.NetnsPath); err == nil {
		c.dialer = d
	}
	return c, nil
}

// SetLogger sets where Down and the waits report progress.
func (c *Cluster) SetLogger(l *slog.Logger) { c.log = l }

func (c *Cluster) save() error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.Dir, "state.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("cluster state: %w", err)
	}
	return os.Rename(tmp, filepath.Join(c.Dir, "state.json"))
}

func (c *Cluster) loadCredentials() error {
	var err error
	pki := filepath.Join(c.Dir, "pki")
	if c.caPEM, err = os.ReadFile(filepath.Join(pki, "ca.crt")); err != nil {
		return fmt.Errorf("cluster credentials: %w", err)
	}
	if c.admin.certPEM, err = os.ReadFile(filepath.Join(pki, "admin.crt")); err != nil {
		return fmt.Errorf("cluster credentials: %w", err)
	}
	if c.admin.keyPEM, err = os.ReadFile(filepath.Join(pki, "admin.key")); err != nil {
		return fmt.Errorf("cluster credentials: %w", err)
	}
	return nil
}

// Dialer dials inside the cluster's network namespace.
func (c *Cluster) Dialer() *Dialer { return c.dialer }

// RESTConfig is an administrator's client configuration whose connections are made inside
// the cluster's network namespace.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host: c.APIServer,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.caPEM,
			CertData: c.admin.certPEM,
			KeyData:  c.admin.keyPEM,
		},
		Dial:    c.dialer.DialContext,
		QPS:     50,
		Burst:   100,
		Timeout: 30 * time.Second,
	}
}

// Client is a clientset on RESTConfig.
func (c *Cluster) Client() (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(c.RESTConfig())
}

// HTTPClient is an HTTP client whose connections are made inside the cluster's network
// namespace (plain HTTP to Services and pods by IP).
func (c *Cluster) HTTPClient() *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: c.dialer.DialContext, DisableKeepAlives: true},
	}
}

// Kubectl runs kubectl with the administrator's kubeconfig inside the network namespace and
// returns its standard output; the error carries its standard error.
func (c *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	kubectl := c.tools["kubectl"]
	if kubectl == "" {
		p, err := FindTools("")
		if err != nil {
			return nil, err
		}
		kubectl = p["kubectl"]
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + c.NetnsPath, "--", kubectl, "--kubeconfig=" + c.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// ImportImage imports a docker-archive or OCI tarball into containerd's k8s.io namespace,
// where the kubelet finds images (pods must use imagePullPolicy Never or IfNotPresent: the
// cluster reaches no registry).
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	ctr, err := lookPath("ctr")
	if err != nil {
		return fmt.Errorf("%w: ctr (apt-get install containerd)", ErrToolMissing)
	}
	out, err := exec.CommandContext(ctx, ctr, "--address", c.ContainerdSocket, "--namespace", "k8s.io",
		"images", "import", "--no-unpack=false", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w: %s", tarball, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// writeFiles writes the certificates, kubeconfigs, component configurations and images.
func (c *Cluster) writeFiles(ctx context.Context) error {
	for _, d := range []string{
		"pki", "logs", "etcd", "images", "containerd/opt", "kubelet/pod-logs", "cni/net.d", "cni/networks",
		"apiserver-cert-dir", "controller-manager-cert-dir", "scheduler-cert-dir",
	} {
		if err := os.MkdirAll(filepath.Join(c.Dir, d), 0o700); err != nil {
			return err
		}
	}
	pki := filepath.Join(c.Dir, "pki")
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	c.caPEM = ca.certPEM
	if err := os.WriteFile(filepath.Join(pki, "ca.crt"), ca.certPEM, 0o644); err != nil {
		return err
	}
	if err := serviceAccountKey(pki); err != nil {
		return err
	}
	serving, err := ca.issue(pkix.Name{CommonName: "kube-apiserver"}, []string{
		NodeIP, APIServiceIP, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	})
	if err != nil {
		return err
	}
	if err := serving.write(pki, "apiserver"); err != nil {
		return err
	}
	// Client identities: the user is the CommonName, the groups the Organization. The
	// components' users are the ones the API server's default RBAC bindings name.
	clients := []struct {
		file, user string
		groups     []string
	}{
		{"admin", "profsym-admin", []string{"system:masters"}},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}},
		{"controller-manager", "system:kube-controller-manager", nil},
		{"scheduler", "system:kube-scheduler", nil},
		{"kubelet", "system:node:" + NodeName, []string{"system:nodes"}},
		{"kube-proxy", "system:kube-proxy", nil},
	}
	for _, cl := range clients {
		kp, err := ca.issue(pkix.Name{CommonName: cl.user, Organization: cl.groups}, nil)
		if err != nil {
			return err
		}
		if err := kp.write(pki, cl.file); err != nil {
			return err
		}
		if cl.file == "admin" {
			c.admin = kp
		}
		path := filepath.Join(c.Dir, cl.file+".kubeconfig")
		if cl.file == "admin" {
			path = c.Kubeconfig
		}
		if err := os.WriteFile(path, kubeconfig(c.APIServer, ca.certPEM, kp), 0o600); err != nil {
			return err
		}
	}
	files := map[string]string{
		"containerd/config.toml":        containerdConfig(c.Dir, c.ContainerdSocket),
		"kubelet/config.yaml":           kubeletConfig(c.Dir, c.ContainerdSocket, c.CgroupRoot),
		"kubelet/resolv.conf":           "",
		"kube-proxy.yaml":               kubeProxyConfig(c.Dir),
		"cni/net.d/10-profsym.conflist": cniConfig(c.CNINetwork, c.Dir),
		"coredns.yaml":                  coreDNSManifest(),
	}
	for rel, content := range files {
		path := filepath.Join(c.Dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return writeImages(ctx, filepath.Join(c.Dir, "images"), c.tools["busybox"], c.tools["coredns"])
}

func kubeconfig(server string, ca []byte, kp keyPair) []byte {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: profsym
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: profsym
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: profsym
  context:
    cluster: profsym
    user: profsym
current-context: profsym
`, server, b64(ca), b64(kp.certPEM), b64(kp.keyPEM))
}

// startControlPlane starts etcd, the API server, the controller manager and the scheduler,
// each waited for.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	d, pki := c.Dir, filepath.Join(c.Dir, "pki")
	if err := c.start("etcd", c.tools["etcd"],
		"--name=profsym", "--data-dir="+filepath.Join(d, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=profsym=http://127.0.0.1:2380", "--log-level=warn",
	); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, "etcd", "http://127.0.0.1:2379/health", nil, time.Minute); err != nil {
		return err
	}
	if err := c.start("kube-apiserver", c.tools["kube-apiserver"],
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address="+NodeIP, "--advertise-address="+NodeIP, "--secure-port="+apiPort,
		"--cert-dir="+filepath.Join(d, "apiserver-cert-dir"),
		"--tls-cert-file="+filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file="+filepath.Join(pki, "apiserver.key"),
		"--client-ca-file="+filepath.Join(pki, "ca.crt"),
		"--kubelet-client-certificate="+filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+filepath.Join(pki, "apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range="+ServiceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--allow-privileged=true",
	); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, "kube-apiserver", c.APIServer+"/readyz", c.apiTLS(), 2*time.Minute); err != nil {
		return err
	}
	if err := c.start("kube-controller-manager", c.tools["kube-controller-manager"],
		"--kubeconfig="+filepath.Join(d, "controller-manager.kubeconfig"),
		"--authentication-kubeconfig="+filepath.Join(d, "controller-manager.kubeconfig"),
		"--authorization-kubeconfig="+filepath.Join(d, "controller-manager.kubeconfig"),
		"--bind-address=127.0.0.1", "--cert-dir="+filepath.Join(d, "controller-manager-cert-dir"),
		"--leader-elect=false", "--use-service-account-credentials=true",
		"--root-ca-file="+filepath.Join(pki, "ca.crt"),
		"--service-account-private-key-file="+filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range="+ServiceCIDR,
	); err != nil {
		return err
	}
	if err := c.start("kube-scheduler", c.tools["kube-scheduler"],
		"--kubeconfig="+filepath.Join(d, "scheduler.kubeconfig"),
		"--authentication-kubeconfig="+filepath.Join(d, "scheduler.kubeconfig"),
		"--authorization-kubeconfig="+filepath.Join(d, "scheduler.kubeconfig"),
		"--bind-address=127.0.0.1", "--cert-dir="+filepath.Join(d, "scheduler-cert-dir"),
		"--leader-elect=false",
	); err != nil {
		return err
	}
	insecure := &tls.Config{InsecureSkipVerify: true} // their self-signed serving certificates; /healthz needs no client
	if err := c.waitHTTP(ctx, "kube-controller-manager", "https://127.0.0.1:10257/healthz", insecure, time.Minute); err != nil {
		return err
	}
	return c.waitHTTP(ctx, "kube-scheduler", "https://127.0.0.1:10259/healthz", insecure, time.Minute)
}

// startNode starts containerd, imports the images, and starts the kubelet and kube-proxy; it
// returns once the node is Ready.
func (c *Cluster) startNode(ctx context.Context) error {
	if err := c.start("containerd", c.tools["containerd"], "--config="+filepath.Join(c.Dir, "containerd", "config.toml")); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "containerd", time.Minute, func() error {
		return exec.CommandContext(ctx, c.tools["ctr"], "--address", c.ContainerdSocket, "version").Run()
	}); err != nil {
		return err
	}
	for _, img := range []string{"pause.tar", "busybox.tar", "coredns.tar"} {
		if err := c.ImportImage(ctx, filepath.Join(c.Dir, "images", img)); err != nil {
			return err
		}
	}
	if err := c.start("kubelet", c.tools["kubelet"],
		"--config="+filepath.Join(c.Dir, "kubelet", "config.yaml"),
		"--kubeconfig="+filepath.Join(c.Dir, "kubelet.kubeconfig"),
		"--root-dir="+filepath.Join(c.Dir, "kubelet", "root"),
		"--cert-dir="+filepath.Join(c.Dir, "kubelet", "pki"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP,
		"--v=1",
	); err != nil {
		return err
	}
	if err := c.start("kube-proxy", c.tools["kube-proxy"], "--config="+filepath.Join(c.Dir, "kube-proxy.yaml")); err != nil {
		return err
	}
	client, err := c.Client()
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "node "+NodeName+" Ready", 3*time.Minute, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("condition Ready is %s: %s", cond.Status, cond.Message)
			}
		}
		return errors.New("no Ready condition yet")
	}); err != nil {
		return err
	}
	return c.waitHTTP(ctx, "kube-proxy", "http://"+NodeIP+":10256/healthz", nil, time.Minute)
}

// startDNS deploys CoreDNS in kube-system behind the kube-dns Service at DNSServiceIP and
// waits until it answers; and waits for the default ServiceAccount that pods need.
func (c *Cluster) startDNS(ctx context.Context) error {
	client, err := c.Client()
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "default ServiceAccounts", time.Minute, func() error {
		for _, ns := range []string{"default", "kube-system"} {
			if _, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, nil, "apply", "-f", filepath.Join(c.Dir, "coredns.yaml")); err != nil {
		return err
	}
	resolver := c.dialer.Resolver(DNSServiceIP + ":53")
	return c.waitFor(ctx, "cluster DNS", 3*time.Minute, func() error {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		addrs, err := resolver.LookupHost(lctx, "kubernetes.default.svc.cluster.local")
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0] != APIServiceIP {
			return fmt.Errorf("kubernetes.default.svc.cluster.local is %v, want %s", addrs, APIServiceIP)
		}
		return nil
	})
}

// start starts a daemon inside the network namespace (nsenter enters the network namespace
// only: the daemons share the machine's mount namespace, so the kubelet's volume mounts and
// containerd's rootfs mounts see each other, and /sys/fs/cgroup stays the machine's), in a
// session and process group of its own, logging to Dir/logs/NAME.log.
func (c *Cluster) start(name, bin string, args ...string) error {
	logPath := filepath.Join(c.Dir, "logs", name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	// Not tied to a context: the daemons outlive Up (and the process that called it, for
	// make cluster-up); Down stops them.
	cmd := exec.Command("nsenter", append([]string{"--net=" + c.NetnsPath, "--", bin}, args...)...) //nolint:noctx // see above
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), "PATH="+childPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.Procs = append(c.Procs, Proc{Name: name, PID: cmd.Process.Pid, Log: logPath})
	go func() { _ = cmd.Wait() }()
	c.log.Info("started", "daemon", name, "pid", cmd.Process.Pid)
	return c.save()
}

// exited names a daemon that is no longer running, so a wait does not outlast a crash.
func (c *Cluster) exited() error {
	for _, p := range c.Procs {
		if !c.running(p) {
			return fmt.Errorf("%s exited (log: %s)", p.Name, p.Log)
		}
	}
	return nil
}

// running reports whether p's process is alive and still ours (its command line names the
// cluster's directory, so a recycled PID is never taken for it).
func (c *Cluster) running(p Proc) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	// The command line reads empty while the process execs (nsenter becoming the daemon).
	if err != nil || len(cmdline) > 0 && !strings.Contains(string(cmdline), c.Dir) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses; Z is a zombie.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'Z' {
		return false
	}
	return true
}

func (c *Cluster) apiTLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.caPEM)
	cert, err := tls.X509KeyPair(c.admin.certPEM, c.admin.keyPEM)
	if err != nil {
		return &tls.Config{RootCAs: pool}
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
}

// waitHTTP polls url (inside the namespace) until it answers 200.
func (c *Cluster) waitHTTP(ctx context.Context, what, url string, tlsConfig *tls.Config, timeout time.Duration) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: c.dialer.DialContext, TLSClientConfig: tlsConfig, DisableKeepAlives: true,
	}}
	return c.waitFor(ctx, what, timeout, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// waitFor polls check until it succeeds, a daemon exits, ctx ends or timeout passes.
func (c *Cluster) waitFor(ctx context.Context, what string, timeout time.Duration, check func() error) error {
	start := time.Now()
	deadline := start.Add(timeout)
	var last error
	for {
		if err := c.exited(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if last = check(); last == nil {
			c.log.Info("ready", "what", what, "after", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %w)", what, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// tails is the end of every daemon's log, for an error.
func (c *Cluster) tails() string {
	var b strings.Builder
	for _, p := range c.Procs {
		data, err := os.ReadFile(p.Log)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		fmt.Fprintf(&b, "--- last lines of %s:\n%s\n", p.Name, strings.Join(lines, "\n"))
	}
	return b.String()
}

func randomLetters(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return string(b)
}
