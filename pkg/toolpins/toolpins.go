// Package toolpins reads .ci/pins, the one list of the tools that the build, the tests and the
// offline images build from the Go module proxy (MinIO, golangci-lint, the Kubernetes binaries,
// ...): each with its module, version and package, so that a version is written once.
package toolpins

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// File is where the pins live, relative to the repository's root.
const File = ".ci/pins"

// Pin is one tool: what `go install Module/Package@Version` builds.
type Pin struct {
	Name    string
	Module  string
	Version string
	// Package is the package inside Module that is built, "." for the module's root.
	Package string
}

// ImportPath is the package's full import path.
func (p Pin) ImportPath() string {
	if p.Package == "." || p.Package == "" {
		return p.Module
	}
	return path.Join(p.Module, strings.TrimPrefix(p.Package, "./"))
}

// Install is the argument of `go install` that builds the pinned tool.
func (p Pin) Install() string { return p.ImportPath() + "@" + p.Version }

// Pins is the file's pins in order.
type Pins []Pin

// Get returns the pin called name.
func (ps Pins) Get(name string) (Pin, error) {
	for _, p := range ps {
		if p.Name == name {
			return p, nil
		}
	}
	return Pin{}, fmt.Errorf("%s: no pin named %q", File, name)
}

// Load reads the pins of the repository at root.
func Load(root string) (Pins, error) {
	data, err := os.ReadFile(filepath.Join(root, File))
	if err != nil {
		return nil, fmt.Errorf("tool pins: %w", err)
	}
	return Parse(data)
}

// Parse reads pins: one per line, "name module version package", blank lines and lines
// starting with # left out.
func Parse(data []byte) (Pins, error) {
	var ps Pins
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("%s:%d: want 4 fields (name module version package), got %d", File, n, len(f))
		}
		p := Pin{Name: f[0], Module: f[1], Version: f[2], Package: f[3]}
		if seen[p.Name] {
			return nil, fmt.Errorf("%s:%d: pin %q named twice", File, n, p.Name)
		}
		if !strings.HasPrefix(p.Version, "v") || strings.Contains(p.Version, "latest") {
			return nil, fmt.Errorf("%s:%d: %s: version %q is not an exact module version", File, n, p.Name, p.Version)
		}
		if p.Package != "." && !strings.HasPrefix(p.Package, "./") {
			return nil, fmt.Errorf("%s:%d: %s: package %q is not . or ./path", File, n, p.Name, p.Package)
		}
		seen[p.Name] = true
		ps = append(ps, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", File, err)
	}
	return ps, nil
}
