package kernelpkg

import (
	"slices"
	"strings"
	"testing"
)

// Real file names and releases of each distribution family (uname -r of their kernels), and
// names that are no kernel's.
func TestProto(t *testing.T) {
	for _, c := range []struct {
		filename        string
		release, module string // "" release: not a kernel binary
		packages        []string
	}{
		// Debian: stable ABIs, cloud, rt, 32-bit, arm, backports before and since Debian 13.
		{"vmlinux-6.1.0-57-amd64", "6.1.0-57-amd64", "", []string{"linux-image-6.1.0-57-amd64-dbg (Debian)"}},
		{"/lib/modules/6.1.0-57-amd64/brd.ko", "6.1.0-57-amd64", "brd", []string{"linux-image-6.1.0-57-amd64-dbg (Debian)"}},
		{"vmlinux-5.10.0-35-cloud-amd64", "5.10.0-35-cloud-amd64", "", []string{"linux-image-5.10.0-35-cloud-amd64-dbg (Debian)"}},
		{"vmlinux-6.1.0-28-rt-arm64", "6.1.0-28-rt-arm64", "", []string{"linux-image-6.1.0-28-rt-arm64-dbg (Debian)"}},
		{"vmlinux-6.1.0-57-686-pae", "6.1.0-57-686-pae", "", []string{"linux-image-6.1.0-57-686-pae-dbg (Debian)"}},
		{"/lib/modules/4.19.0-27-armmp/nf_conntrack.ko", "4.19.0-27-armmp", "nf_conntrack", []string{"linux-image-4.19.0-27-armmp-dbg (Debian)"}},
		{"vmlinux-6.1.0-0.deb11.17-amd64", "6.1.0-0.deb11.17-amd64", "", []string{"linux-image-6.1.0-0.deb11.17-amd64-dbg (Debian)"}},
		{"vmlinux-6.12.38+deb13-amd64", "6.12.38+deb13-amd64", "", []string{"linux-image-6.12.38+deb13-amd64-dbg (Debian)"}},
		{"vmlinux-6.12.12+bpo-cloud-arm64", "6.12.12+bpo-cloud-arm64", "", []string{"linux-image-6.12.12+bpo-cloud-arm64-dbg (Debian)"}},
		// Ubuntu: generic, 64k pages, lowlatency and the cloud kernels.
		{"vmlinux-6.8.0-45-generic", "6.8.0-45-generic", "", []string{"linux-image-unsigned-6.8.0-45-generic-dbgsym (Ubuntu, ddebs.ubuntu.com)"}},
		{"vmlinux-6.8.0-45-generic-64k", "6.8.0-45-generic-64k", "", []string{"linux-image-unsigned-6.8.0-45-generic-64k-dbgsym (Ubuntu, ddebs.ubuntu.com)"}},
		{"/lib/modules/5.15.0-1051-aws/ena.ko", "5.15.0-1051-aws", "ena", []string{"linux-image-unsigned-5.15.0-1051-aws-dbgsym (Ubuntu, ddebs.ubuntu.com)"}},
		{"vmlinux-5.4.0-1103-azure", "5.4.0-1103-azure", "", []string{"linux-image-unsigned-5.4.0-1103-azure-dbgsym (Ubuntu, ddebs.ubuntu.com)"}},
		{"vmlinux-6.8.0-1015-gcp", "6.8.0-1015-gcp", "", []string{"linux-image-unsigned-6.8.0-1015-gcp-dbgsym (Ubuntu, ddebs.ubuntu.com)"}},
		{"vmlinux-5.15.0-91-lowlatency", "5.15.0-91-lowlatency", "", []string{"linux-image-unsigned-5.15.0-91-lowlatency-dbgsym (Ubuntu, ddebs.ubuntu.com)"}},
		{"vmlinux-6.8.0-1013-oracle", "6.8.0-1013-oracle", "", []string{"linux-image-unsigned-6.8.0-1013-oracle-dbgsym (Ubuntu, ddebs.ubuntu.com)"}},
		// Fedora, RHEL and rebuilds, Oracle UEK, Amazon Linux; debug and real-time variants.
		{"vmlinux-6.5.6-300.fc39.x86_64", "6.5.6-300.fc39.x86_64", "", []string{"kernel-debuginfo-6.5.6-300.fc39.x86_64 (Fedora)"}},
		{"/lib/modules/6.11.4-301.fc41.aarch64/xfs.ko", "6.11.4-301.fc41.aarch64", "xfs", []string{"kernel-debuginfo-6.11.4-301.fc41.aarch64 (Fedora)"}},
		{"vmlinux-6.5.6-300.fc39.x86_64+debug", "6.5.6-300.fc39.x86_64+debug", "", []string{"kernel-debug-debuginfo-6.5.6-300.fc39.x86_64 (Fedora)"}},
		{"vmlinux-5.14.0-362.8.1.el9_3.x86_64", "5.14.0-362.8.1.el9_3.x86_64", "", []string{"kernel-debuginfo-5.14.0-362.8.1.el9_3.x86_64 (RHEL 9, CentOS Stream, Rocky Linux, AlmaLinux, Oracle Linux)"}},
		{"vmlinux-5.14.0-410.el9.aarch64+64k", "5.14.0-410.el9.aarch64+64k", "", []string{"kernel-64k-debuginfo-5.14.0-410.el9.aarch64 (RHEL 9, CentOS Stream, Rocky Linux, AlmaLinux, Oracle Linux)"}},
		{"vmlinux-4.18.0-513.5.1.el8_9.x86_64", "4.18.0-513.5.1.el8_9.x86_64", "", []string{"kernel-debuginfo-4.18.0-513.5.1.el8_9.x86_64 (RHEL 8, CentOS Stream, Rocky Linux, AlmaLinux, Oracle Linux)"}},
		{"vmlinux-5.14.0-70.13.1.rt21.83.el9_0.x86_64", "5.14.0-70.13.1.rt21.83.el9_0.x86_64", "", []string{"kernel-rt-debuginfo-5.14.0-70.13.1.rt21.83.el9_0.x86_64 (RHEL 9, CentOS Stream, Rocky Linux, AlmaLinux, Oracle Linux)"}},
		{"vmlinux-3.10.0-1160.105.1.el7.x86_64", "3.10.0-1160.105.1.el7.x86_64", "", []string{"kernel-debuginfo-3.10.0-1160.105.1.el7.x86_64 (RHEL 7, CentOS, Oracle Linux)"}},
		{"vmlinux-5.15.0-200.131.27.el9uek.x86_64", "5.15.0-200.131.27.el9uek.x86_64", "", []string{"kernel-uek-debuginfo-5.15.0-200.131.27.el9uek.x86_64 (Oracle Linux, UEK)"}},
		{"/lib/modules/6.1.55-75.123.amzn2023.x86_64/ena.ko", "6.1.55-75.123.amzn2023.x86_64", "ena", []string{"kernel-debuginfo-6.1.55-75.123.amzn2023.x86_64 (Amazon Linux 2023)"}},
		{"vmlinux-5.10.198-187.748.amzn2.aarch64", "5.10.198-187.748.amzn2.aarch64", "", []string{"kernel-debuginfo-5.10.198-187.748.amzn2.aarch64 (Amazon Linux 2)"}},
		// Kernels no known distribution names: recognized, no package.
		{"vmlinux-6.10.10-arch1-1", "6.10.10-arch1-1", "", nil},
		{"vmlinux-6.4.0-150600.23.22-default", "6.4.0-150600.23.22-default", "", nil},
		{"vmlinux-6.6.0", "6.6.0", "", nil},
		{"/lib/modules/6.1.0-57-custom/brd.ko", "6.1.0-57-custom", "brd", nil},
		{"vmlinux-6.5.6-300.fc39.i386", "6.5.6-300.fc39.i386", "", nil},
		// Not a kernel binary, or not in the collector's forms.
		{"/usr/bin/prog", "", "", nil},
		{"", "", "", nil},
		{"vmlinux", "", "", nil},
		{"vmlinux-", "", "", nil},
		{"/boot/vmlinux-6.1.0-57-amd64", "", "", nil},
		{"vmlinuz-6.1.0-57-amd64", "", "", nil},
		{"vmlinux-6.1.0-57-amd64/x", "", "", nil},
		{"vmlinux-latest", "", "", nil},
		{"vmlinux-6.1.0 57", "", "", nil},
		{"vmlinux-6.1.0-57-amd64\x1b[31m", "", "", nil},
		{"vmlinux-6.1<b>", "", "", nil},
		{"vmlinux-" + strings.Repeat("6", 65), "", "", nil},
		{"/lib/modules/6.1.0-57-amd64/brd", "", "", nil},
		{"/lib/modules/6.1.0-57-amd64/.ko", "", "", nil},
		{"/lib/modules/6.1.0-57-amd64/kernel/drivers/block/brd.ko", "", "", nil},
		{"/lib/modules/6.1.0-57-amd64/brd.ko.xz", "", "", nil},
		{"/lib/modules//brd.ko", "", "", nil},
		{"/lib/modules/6.1.0-57-amd64", "", "", nil},
		{"/lib/modules/../brd.ko", "", "", nil},
		{"/lib/modules/6.1.0-57-amd64/b<r>d.ko", "", "", nil},
	} {
		t.Run(c.filename, func(t *testing.T) {
			k, ok := Parse(c.filename)
			if ok != (c.release != "") || k.Release != c.release || k.Module != c.module {
				t.Fatalf("Parse = %+v, %v; want release %q module %q", k, ok, c.release, c.module)
			}
			kd := Proto([]string{"/usr/bin/other", c.filename})
			if c.release == "" {
				if kd != nil {
					t.Fatalf("Proto = %v, want nil", kd)
				}
				return
			}
			if kd.GetRelease() != c.release || kd.GetModule() != c.module || !slices.Equal(kd.GetPackages(), c.packages) {
				t.Fatalf("Proto = %v, want %q %q %q", kd, c.release, c.module, c.packages)
			}
		})
	}
}

// Where each family's package puts the files to upload, and how it is installed.
func TestPackagePaths(t *testing.T) {
	for _, c := range []struct {
		release                                string
		install, vmlinux, moduleDir, moduleExt string
	}{
		{"6.1.0-57-amd64", "", "/usr/lib/debug/boot/vmlinux-6.1.0-57-amd64", "/usr/lib/debug/lib/modules/6.1.0-57-amd64", ".ko"},
		{"6.8.0-45-generic", "", "/usr/lib/debug/boot/vmlinux-6.8.0-45-generic", "/usr/lib/debug/lib/modules/6.8.0-45-generic", ".ko"},
		{"6.5.6-300.fc39.x86_64", "dnf debuginfo-install kernel-6.5.6-300.fc39.x86_64",
			"/usr/lib/debug/lib/modules/6.5.6-300.fc39.x86_64/vmlinux", "/usr/lib/debug/lib/modules/6.5.6-300.fc39.x86_64", ".ko.debug"},
		{"6.5.6-300.fc39.x86_64+debug", "dnf debuginfo-install kernel-debug-6.5.6-300.fc39.x86_64",
			"/usr/lib/debug/lib/modules/6.5.6-300.fc39.x86_64+debug/vmlinux", "/usr/lib/debug/lib/modules/6.5.6-300.fc39.x86_64+debug", ".ko.debug"},
		{"5.10.198-187.748.amzn2.x86_64", "debuginfo-install kernel-5.10.198-187.748.amzn2.x86_64",
			"/usr/lib/debug/lib/modules/5.10.198-187.748.amzn2.x86_64/vmlinux", "/usr/lib/debug/lib/modules/5.10.198-187.748.amzn2.x86_64", ".ko.debug"},
	} {
		ps := Packages(c.release)
		if len(ps) != 1 {
			t.Fatalf("%s: %d packages", c.release, len(ps))
		}
		p := ps[0]
		if p.Install != c.install || p.Vmlinux != c.vmlinux || p.ModuleDir != c.moduleDir || p.ModuleExt != c.moduleExt {
			t.Errorf("%s: %+v", c.release, p)
		}
	}
}

// Whatever a request names its binary, recognizing it neither panics nor lets anything but a
// release's and a module name's characters through.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"vmlinux-6.1.0-57-amd64", "/lib/modules/6.8.0-45-generic/brd.ko", "vmlinux-5.14.0-70.13.1.rt21.83.el9_0.x86_64+debug", "/lib/modules/x/y.ko", "vmlinux-1.el9.x86_64+"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		k, ok := Parse(name)
		if !ok {
			return
		}
		if !releaseRE.MatchString(k.Release) || k.Module != "" && !moduleRE.MatchString(k.Module) {
			t.Fatalf("Parse(%q) = %+v", name, k)
		}
		for _, p := range Packages(k.Release) {
			if p.Name == "" || strings.ContainsAny(p.String(), "\n\x1b<>&") {
				t.Fatalf("Packages(%q) = %+v", k.Release, p)
			}
		}
	})
}
