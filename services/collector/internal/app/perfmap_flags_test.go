//go:build linux

package app

import "testing"

func TestPerfMapFlags(t *testing.T) {
	cli, err := parse(t, nil, "--output-file", "x")
	if err != nil {
		t.Fatal(err)
	}
	if !cli.PerfMaps || cli.PerfMapMaxBytesPerProcess != 16<<20 || cli.PerfMapMaxBytes != 64<<20 {
		t.Errorf("defaults: perf maps %v, %d per process, %d in all", cli.PerfMaps, cli.PerfMapMaxBytesPerProcess, cli.PerfMapMaxBytes)
	}
	if cli, err = parse(t, nil, "--output-file", "x", "--no-perf-maps"); err != nil || cli.PerfMaps {
		t.Errorf("--no-perf-maps: perf maps %v, err %v", cli.PerfMaps, err)
	}
	if cli, err = parse(t, map[string]string{"PROFSYM_PERF_MAPS": "false"}, "--output-file", "x"); err != nil || cli.PerfMaps {
		t.Errorf("PROFSYM_PERF_MAPS=false: perf maps %v, err %v", cli.PerfMaps, err)
	}
	for _, bad := range [][]string{
		{"--output-file", "x", "--perf-map-max-bytes-per-process", "100"},
		{"--output-file", "x", "--perf-map-max-bytes", "-1"},
		{"--output-file", "x", "--perf-map-max-bytes-per-process", "2000000", "--perf-map-max-bytes", "1000000"},
	} {
		if _, err := parse(t, nil, bad...); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}
