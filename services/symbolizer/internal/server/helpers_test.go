package server

import (
	"crypto/sha256"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func sha256Sum(b []byte) [32]byte { return sha256.Sum256(b) }

func protojsonUnmarshal(b []byte, m proto.Message) error { return protojson.Unmarshal(b, m) }
