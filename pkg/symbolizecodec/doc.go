// Package symbolizecodec owns the Symbolize answer's frames: their shape, how a server lays
// them out, how they travel and how a client reads them back. The symbolizer builds every
// ModuleResult with Builder and sends it with Codec; the gateway, the Collector processor and
// the benchmark driver receive with Codec and read with Decode. One package, so the layout
// the server writes and the checks the clients make cannot drift apart, and tests build
// answers with the same Builder the server uses.
//
// The shape (ModuleResult in proto/profsym/symbolizer/v1): per requested address a frame
// count, the frames of all addresses in six parallel columns, innermost first, and a string
// table whose entry 0 is "". A linkage name equal to its function's name is sent as 0. It
// is cheap on the wire but easy to misread, so Decode checks every count and index.
//
// Codec is connect's binary protobuf codec ("proto", used by the Connect, gRPC and gRPC-Web
// protocols) with a hand-written encoder and decoder for SymbolizeResponse. Every other
// message goes to google.golang.org/protobuf as in connect's own codec.
//
// Why by hand: a 10,000-address answer is about 12,000 frames in six packed columns and
// 11,000 strings. The reflective encoder spent a quarter of a Redis-cached request's CPU on
// it (a call per varint, a table-driven walk per field), and the reflective decoder spent
// about 3.5 ms of the client's, most of it allocating each string on its own. This package
// writes and reads the columns in tight loops and copies all of an answer's strings into one
// allocation.
//
// Both directions agree with google.golang.org/protobuf: the encoder's output is byte for
// byte what proto.Marshal writes and the decoder's result is what proto.Unmarshal gives
// (tests compare them on random messages and fuzz them), including the refusal of strings
// that are not valid UTF-8. A message either was not written for (unknown fields, a nil
// element, an unpacked column, a field repeated where the encoder writes it once) goes to
// google.golang.org/protobuf.
package symbolizecodec
