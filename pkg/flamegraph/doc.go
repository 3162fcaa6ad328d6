// Package flamegraph renders profiles as a self-contained interactive flame graph: one HTML
// file that holds the merged call tree as JSON and a small script and style sheet of our own
// that draw it, so it opens from disk, from a CI artifact or from an air-gapped machine with no
// network fetch at all.
//
// The call tree merges stacks by function (name, file, frame kind and whether the frame was
// inlined); an inline frame is a node of its own, drawn dashed and marked "inlined", so a
// function the compiler folded into its caller still shows where the time went. Each node
// keeps its samples per line, and its label and tooltip name the file and the lines.
//
// Why our own renderer: the page must not fetch anything (profiles leave the machine only when
// their owner says so), and only our own code lives in this tree. The maintained renderers
// (d3-flame-graph, speedscope, pprof's web view) are npm packages or parts of another program
// that we would have to vendor, minified, together with their dependencies; a flame graph of
// DOM rectangles with zoom and search is a few hundred lines that we can read and test here.
//
// Read reads the profile files profsym writes (pprof, gzipped or not; OTLP
// ExportProfilesServiceRequest as plain protobuf, as the node collector's uvarint-delimited
// records, or as the gateway file exporter's 4-byte length-delimited records) into stacks.
package flamegraph
