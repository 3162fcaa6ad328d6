// Package otlpprofiles is the OTLP side of symbolization, shared by the gateway and the
// Collector's symbolize processor so both give one semantics:
//
//   - Validate checks every index of an OTLP profiles request before anything reads it: pdata
//     decodes indices without checking them and panics on the first bad one.
//   - Str, Attr, Mapping, Location and the other readers read a dictionary without panicking: a
//     validated request may still reference index 0 of an empty table, which OTLP defines as
//     the zero value.
//   - AddSymbols adds symbolization results to a dictionary: functions and strings are interned
//     with the package's own maps (pdata's Set* helpers scan the whole table per call), lines go
//     onto the locations innermost first, and symbolized mappings get the
//     pprof.mapping.has_* attributes. Then the dictionary is compacted.
//   - Compact drops the entries nothing references and renumbers indices, so outputs hold no
//     orphans while every sample keeps its meaning; Orphans reports them, so outputs can be
//     checked against the Profiling SIG's orphan check.
//
// Subpackage symbolize decides which locations need symbols and asks the symbolizer service.
package otlpprofiles
