// Package symbolizecodec is connect's binary protobuf codec ("proto", used by the Connect,
// gRPC and gRPC-Web protocols) with a hand-written encoder and decoder for
// SymbolizeResponse. Every other message goes to google.golang.org/protobuf as in connect's
// own codec. The symbolizer encodes its answers with it; its clients (the gateway, the
// benchmark driver) decode them with it.
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
