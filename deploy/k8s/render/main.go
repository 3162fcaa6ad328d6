// Command render writes the kustomize manifests of deploy/k8s from the Helm chart
// deploy/helm/profsym, the one source of both: for the base and each overlay it runs `helm
// template` with that directory's values.yaml and writes the objects into its generated/ folder,
// one file per chart template, with a kustomization.yaml listing them. The gateway's
// configuration becomes a configMapGenerator file there, so that its ConfigMap's name carries a
// hash of its content as kustomize users expect (a changed configuration rolls the gateway).
// `make generate` runs it; `make check-generated` fails when the committed files differ from a
// fresh rendering. deploy/k8s/README.md explains the layout.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Target is one kustomize directory of deploy/k8s rendered from the chart.
type Target struct {
	// Dir is the directory under deploy/k8s; the objects go to Dir/generated.
	Dir string
	// Values are the values files, relative to deploy/k8s, given to helm in this order (later
	// ones override earlier ones).
	Values []string
}

// Targets are the directories rendered from the chart. upload-only is the dev overlay with the
// collector in upload-only mode: its values are dev's and its own on top.
var Targets = []Target{
	{Dir: "base", Values: []string{"base/values.yaml"}},
	{Dir: "overlays/dev", Values: []string{"overlays/dev/values.yaml"}},
	{Dir: "overlays/production", Values: []string{"overlays/production/values.yaml"}},
	{Dir: "overlays/upload-only", Values: []string{"overlays/dev/values.yaml", "overlays/upload-only/values.yaml"}},
}

// ReleaseName is the Helm release the objects are rendered as: it names the gateway's
// ClusterRole (profsym-gateway-k8s-attributes).
const ReleaseName = "profsym"

// GeneratedDir is the folder of each target that this command owns.
const GeneratedDir = "generated"

// gatewayConfigMap is the ConfigMap written as a configMapGenerator.
const gatewayConfigMap = "gateway-config"

func main() {
	root := flag.String("repo", ".", "the repository's root")
	helm := flag.String("helm", "", "the helm binary (default: $PROFSYM_HELM, then helm on PATH)")
	out := flag.String("out", "", "write the rendering under this folder instead of the repository's deploy/k8s (for comparing)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, *root, *helm, *out); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, root, helm, out string) error {
	if helm == "" {
		helm = os.Getenv("PROFSYM_HELM")
	}
	if helm == "" {
		p, err := exec.LookPath("helm")
		if err != nil {
			return errors.New("helm is not on PATH (bash .ci/install-deps installs it into ~/.cache/profsym/bin; make adds that to PATH)")
		}
		helm = p
	}
	k8s := filepath.Join(root, "deploy", "k8s")
	if out == "" {
		out = k8s
	}
	for _, t := range Targets {
		files, err := Render(ctx, helm, root, t)
		if err != nil {
			return err
		}
		dir := filepath.Join(out, t.Dir, GeneratedDir)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
				return err
			}
		}
		slog.Info("rendered", "dir", filepath.Join(t.Dir, GeneratedDir), "files", len(files))
	}
	return nil
}

// File is one generated file of a target's generated/ folder.
type File struct {
	Name string
	Data []byte
}

var (
	docSep    = regexp.MustCompile(`(?m)^---[ \t]*$`)
	sourceRef = regexp.MustCompile(`(?m)^# Source: (\S+)$`)
)

// Render runs helm template for t and returns the files of its generated/ folder: one per
// chart template that rendered anything, the gateway's configuration, and kustomization.yaml.
func Render(ctx context.Context, helm, root string, t Target) ([]File, error) {
	chart := filepath.Join(root, "deploy", "helm", "profsym")
	args := []string{"template", ReleaseName, chart}
	for _, v := range t.Values {
		args = append(args, "-f", filepath.Join(root, "deploy", "k8s", v))
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	rendered, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: helm template with %s: %w\n%s", t.Dir, strings.Join(t.Values, ", "), err, stderr.String())
	}
	header := Header(t)

	var order []string
	docs := map[string][]string{}
	var gatewayConfig *configMap
	for _, doc := range docSep.Split(string(rendered), -1) {
		doc = strings.TrimSpace(doc)
		if doc == "" {
			continue
		}
		m := sourceRef.FindStringSubmatch(doc)
		if m == nil {
			return nil, fmt.Errorf("%s: a document of helm template has no '# Source:' line:\n%s", t.Dir, doc)
		}
		var cm configMap
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", t.Dir, m[1], err)
		}
		if cm.Kind == "" {
			continue // a template that rendered only comments
		}
		if cm.Kind == "ConfigMap" && cm.Metadata.Name == gatewayConfigMap {
			gatewayConfig = &cm
			continue
		}
		// The objects are applied by kubectl -k, not installed by Helm.
		doc = strings.ReplaceAll(doc, "app.kubernetes.io/managed-by: Helm", "app.kubernetes.io/managed-by: kustomize")
		name := path.Base(m[1])
		if _, ok := docs[name]; !ok {
			order = append(order, name)
		}
		docs[name] = append(docs[name], doc)
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("%s: helm template rendered no object", t.Dir)
	}
	var files []File
	for _, name := range order {
		files = append(files, File{name, []byte(header + "---\n" + strings.Join(docs[name], "\n---\n") + "\n")})
	}

	var k strings.Builder
	k.WriteString(header)
	k.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, name := range order {
		fmt.Fprintf(&k, "  - %s\n", name)
	}
	if gatewayConfig != nil {
		cfg, ok := gatewayConfig.Data["config.yaml"]
		if !ok || len(gatewayConfig.Data) != 1 {
			return nil, fmt.Errorf("%s: ConfigMap %s: want one key, config.yaml", t.Dir, gatewayConfigMap)
		}
		const file = "gateway-config.yaml"
		files = append(files, File{file, []byte(header + cfg)})
		// The name gets a hash of the content (kustomize's configMapGenerator), which kustomize
		// writes into the gateway's Deployment: a changed configuration rolls its pods, also
		// when an overlay replaces or merges it (behavior: replace or merge).
		fmt.Fprintf(&k, "# The gateway's Collector configuration (%s). Its name gets a hash of the content,\n", file)
		k.WriteString("# which kustomize writes into the Deployment: a changed configuration rolls the gateway's\n")
		k.WriteString("# pods, also one an overlay of yours replaces or merges (configMapGenerator, behavior: replace).\n")
		k.WriteString("configMapGenerator:\n")
		fmt.Fprintf(&k, "  - name: %s\n    namespace: %s\n    files:\n      - config.yaml=%s\n", gatewayConfigMap, gatewayConfig.Metadata.Namespace, file)
		if len(gatewayConfig.Metadata.Labels) > 0 {
			k.WriteString("    options:\n      labels:\n")
			keys := make([]string, 0, len(gatewayConfig.Metadata.Labels))
			for key := range gatewayConfig.Metadata.Labels {
				keys = append(keys, key)
			}
			slices.Sort(keys)
			for _, key := range keys {
				v := gatewayConfig.Metadata.Labels[key]
				if key == "app.kubernetes.io/managed-by" && v == "Helm" {
					v = "kustomize"
				}
				fmt.Fprintf(&k, "        %s: %s\n", key, v)
			}
		}
	}
	files = append(files, File{"kustomization.yaml", []byte(k.String())})
	return files, nil
}

// Header opens every generated file of t.
func Header(t Target) string {
	vals := make([]string, len(t.Values))
	for i, v := range t.Values {
		vals[i] = "deploy/k8s/" + v
	}
	return "# Generated by `make generate` (go run ./deploy/k8s/render) from the Helm chart\n" +
		"# deploy/helm/profsym with " + strings.Join(vals, " and ") + ".\n" +
		"# Do not edit: change the chart or the values and run `make generate` (deploy/k8s/README.md).\n"
}

type configMap struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
}
