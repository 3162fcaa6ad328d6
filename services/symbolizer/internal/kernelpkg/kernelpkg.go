// Package kernelpkg tells, from the file names Symbolize requests carried for a binary, whether
// the binary is a Linux kernel image or module and which distribution packages ship its
// debuginfo: what to install, and which files of it to upload, to resolve its frames.
//
// profsym's collector sends kernel frames as addresses of the kernel's debug files under their
// GNU build IDs, naming the kernel image `vmlinux-<release>` and a module
// `/lib/modules/<release>/<module>.ko`; only those two forms are recognized. The packages are
// derived from the release string (`uname -r`) alone, by the naming of Debian, Ubuntu, Fedora,
// RHEL and its rebuilds (CentOS Stream, Rocky Linux, AlmaLinux, Oracle Linux) and Amazon Linux.
// A release none of them names (a custom build, another distribution) gets no package: its
// debug files still resolve by build ID when uploaded from the kernel's build, or when a
// debuginfod server the symbolizer asks (`--debuginfod-url`) has them.
package kernelpkg

import (
	"regexp"
	"slices"
	"strings"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
)

// Kernel is a kernel binary, as its file name says.
type Kernel struct {
	// Release is the kernel release, as `uname -r` prints it.
	Release string
	// Module is the module's name; "" for the kernel image.
	Module string
}

// Package is a distribution package that ships the debug files of one kernel release, and
// where it puts them.
type Package struct {
	// Name is the package's name, for example linux-image-6.1.0-57-amd64-dbg.
	Name string
	// Distribution names the distributions that ship it, and where from when that is not
	// their usual archive: "Debian", "Ubuntu, ddebs.ubuntu.com".
	Distribution string
	// Install is how to install it when the package name alone does not say (the RPM
	// distributions' debuginfo-install); "" otherwise.
	Install string
	// Vmlinux is the path of the kernel image's debug file once the package is installed.
	Vmlinux string
	// ModuleDir is the folder under which the modules' debug files are, ModuleExt their
	// file name extension (".ko", ".ko.debug").
	ModuleDir, ModuleExt string
}

// String is the package as KernelDebuginfo.packages gives it: the name, a space and the
// distribution in parentheses.
func (p Package) String() string { return p.Name + " (" + p.Distribution + ")" }

// The characters of a release and of a module name. A release is at most 64 bytes (the
// kernel's utsname field) and a module name at most 55 (MODULE_NAME_LEN less its NUL). Names
// outside them are not the collector's, and are not printed as a kernel's: they come from
// requests, and the names shown to an operator must be plain text.
var (
	releaseRE = regexp.MustCompile(`^[0-9][A-Za-z0-9._+~-]{0,63}$`)
	moduleRE  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,55}$`)
)

// Parse recognizes a kernel image (`vmlinux-<release>`) or module
// (`/lib/modules/<release>/<module>.ko`) file name; ok is false for every other name.
func Parse(filename string) (k Kernel, ok bool) {
	if rel, found := strings.CutPrefix(filename, "vmlinux-"); found {
		if !releaseRE.MatchString(rel) {
			return Kernel{}, false
		}
		return Kernel{Release: rel}, true
	}
	rest, found := strings.CutPrefix(filename, "/lib/modules/")
	if !found {
		return Kernel{}, false
	}
	rel, file, found := strings.Cut(rest, "/")
	mod, isKo := strings.CutSuffix(file, ".ko")
	if !found || !isKo || !releaseRE.MatchString(rel) || !moduleRE.MatchString(mod) {
		return Kernel{}, false
	}
	return Kernel{Release: rel, Module: mod}, true
}

// FromFilenames is the kernel binary the first recognized name of filenames names (a coverage
// entry's: one binary's names, so they name one kernel binary).
func FromFilenames(filenames []string) (Kernel, bool) {
	for _, f := range filenames {
		if k, ok := Parse(f); ok {
			return k, true
		}
	}
	return Kernel{}, false
}

// Proto is the KernelDebuginfo of a coverage entry with these file names; nil when none names a
// kernel binary.
func Proto(filenames []string) *debuginfov1.KernelDebuginfo {
	k, ok := FromFilenames(filenames)
	if !ok {
		return nil
	}
	kd := &debuginfov1.KernelDebuginfo{Release: k.Release, Module: k.Module}
	for _, p := range Packages(k.Release) {
		kd.Packages = append(kd.Packages, p.String())
	}
	return kd
}

// Flavours of the Debian kernel packages (the release's last part), and of Ubuntu's. The two
// lists share no name, which is what tells the distributions apart: their releases are
// otherwise of one form, <version>-<abi>-<flavour>.
var (
	debianFlavours = []string{
		"amd64", "cloud-amd64", "rt-amd64", "arm64", "arm64-16k", "cloud-arm64", "rt-arm64",
		"686", "686-pae", "rt-686-pae", "armmp", "armmp-lpae", "rt-armmp", "marvell", "rpi",
		"4kc-malta", "5kc-malta", "octeon", "loongson-3", "mips32r2el", "mips64r2el", "mips64r6el",
		"powerpc64le", "powerpc64le-64k", "s390x", "riscv64",
	}
	ubuntuFlavours = []string{
		"generic", "generic-64k", "generic-lpae", "lowlatency", "lowlatency-64k", "realtime",
		"aws", "aws-64k", "azure", "azure-fde", "gcp", "gcp-64k", "gke", "gkeop", "kvm", "oracle",
		"oracle-64k", "ibm", "oem", "raspi", "raspi-nolpae", "nvidia", "nvidia-64k",
		"nvidia-lowlatency", "intel-iotg", "xilinx-zynqmp",
	}
	// Debian: 6.1.0-57-amd64 (a stable ABI), 6.1.0-0.deb11.17-amd64 (a backport before
	// Debian 13), 6.12.38+deb13-amd64 (Debian 13 on), 6.12.12+bpo-amd64 (backports since).
	debianRE = regexp.MustCompile(`^\d+\.\d+(?:\.\d+)?(?:-\d+|-0\.deb\d+\.\d+|\+deb\d+|\+bpo)-([a-z0-9-]+)$`)
	// Ubuntu: 6.8.0-45-generic, 5.15.0-1051-aws.
	ubuntuRE = regexp.MustCompile(`^\d+\.\d+\.\d+-\d+-([a-z0-9-]+)$`)
	// The RPM distributions: <version>-<release>.<dist>.<arch>[+<variant>], the dist tag fcNN
	// (Fedora), elN[_M] (RHEL, CentOS Stream, Rocky Linux, AlmaLinux, Oracle Linux), elNuek
	// (Oracle's Unbreakable Enterprise Kernel) or amznN (Amazon Linux); the variant is the
	// kernel's flavour (debug, rt, 64k), as is an rtNN part of older RHEL real-time releases.
	rpmRE = regexp.MustCompile(`^(\d+\.\d+[0-9A-Za-z._~-]*?)\.(fc\d+|el\d+(?:_\d+)?(?:uek)?|amzn\d+)\.(x86_64|aarch64|ppc64le|s390x)(?:\+([a-z0-9]+(?:-[a-z0-9]+)?))?$`)
	rtRE  = regexp.MustCompile(`\.rt\d`)
	elRE  = regexp.MustCompile(`^el(\d+)`)
)

// Packages are the distribution packages that ship the debug files of a kernel release; none
// for a release no distribution it knows names (or a malformed one).
func Packages(release string) []Package {
	if !releaseRE.MatchString(release) {
		return nil
	}
	if m := debianRE.FindStringSubmatch(release); m != nil && slices.Contains(debianFlavours, m[1]) {
		return []Package{debPackage("linux-image-"+release+"-dbg", "Debian", release)}
	}
	if m := ubuntuRE.FindStringSubmatch(release); m != nil && slices.Contains(ubuntuFlavours, m[1]) {
		return []Package{debPackage("linux-image-unsigned-"+release+"-dbgsym", "Ubuntu, ddebs.ubuntu.com", release)}
	}
	if m := rpmRE.FindStringSubmatch(release); m != nil {
		return []Package{rpmPackage(release, m[1], m[2], m[4])}
	}
	return nil
}

// debPackage is a Debian or Ubuntu debug package: vmlinux under /usr/lib/debug/boot, the
// modules' .ko as the kernel lays them out, under /usr/lib/debug.
func debPackage(name, distribution, release string) Package {
	return Package{
		Name: name, Distribution: distribution,
		Vmlinux:   "/usr/lib/debug/boot/vmlinux-" + release,
		ModuleDir: "/usr/lib/debug/lib/modules/" + release, ModuleExt: ".ko",
	}
}

// rpmPackage is an RPM distribution's kernel debuginfo package: kernel[-uek][-rt][-variant]-
// debuginfo-<release without +variant>, with vmlinux and the modules' .ko.debug under
// /usr/lib/debug/lib/modules/<release>.
func rpmPackage(release, version, dist, variant string) Package {
	base := "kernel"
	if strings.HasSuffix(dist, "uek") {
		base += "-uek"
	}
	if rtRE.MatchString(version) && !strings.HasPrefix(variant, "rt") {
		base += "-rt"
	}
	if variant != "" {
		base += "-" + variant
	}
	nvra, _, _ := strings.Cut(release, "+")
	install := "dnf debuginfo-install " + base + "-" + nvra
	var distribution string
	switch {
	case strings.HasPrefix(dist, "fc"):
		distribution = "Fedora"
	case strings.HasPrefix(dist, "amzn"):
		distribution = "Amazon Linux " + strings.TrimPrefix(dist, "amzn")
		if dist == "amzn2" {
			install = "debuginfo-install " + base + "-" + nvra // yum-utils: Amazon Linux 2 has no dnf
		}
	case strings.HasSuffix(dist, "uek"):
		distribution = "Oracle Linux, UEK"
	default:
		n := elRE.FindStringSubmatch(dist)[1]
		distribution = "RHEL " + n + ", CentOS Stream, Rocky Linux, AlmaLinux, Oracle Linux"
		if n == "7" || n == "6" {
			install = "debuginfo-install " + base + "-" + nvra // yum-utils: no dnf before RHEL 8
			distribution = "RHEL " + n + ", CentOS, Oracle Linux"
		}
	}
	dir := "/usr/lib/debug/lib/modules/" + release
	return Package{
		Name: base + "-debuginfo-" + nvra, Distribution: distribution, Install: install,
		Vmlinux: dir + "/vmlinux", ModuleDir: dir, ModuleExt: ".ko.debug",
	}
}
