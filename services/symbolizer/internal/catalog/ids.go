package catalog

import (
	"encoding/base64"
	"fmt"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/binaryid"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
)

// ID is a typed binary ID.
type ID struct {
	Type debuginfov1.BuildIDType `json:"type"`
	ID   string                  `json:"id"`
}

func (i ID) String() string { return typeName(i.Type) + ":" + i.ID }

// ValidateID checks an ID against the syntax of its type. The message names no field; callers
// prefix it with theirs.
func ValidateID(typ debuginfov1.BuildIDType, id string) error {
	switch typ {
	case debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU:
		if !binaryid.ValidGNU(id) {
			return fmt.Errorf("not lower-case hex of an even length of 2 to %d digits", binaryid.MaxGNUDigits)
		}
	case debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH:
		if !binaryid.ValidHTLHash(id) {
			return fmt.Errorf("not 32 lower-case hex digits")
		}
	case debuginfov1.BuildIDType_BUILD_ID_TYPE_GO:
		if !binaryid.ValidGo(id) {
			return fmt.Errorf("not a Go build ID: %s", binaryid.GoSyntax)
		}
	default:
		return fmt.Errorf("build ID type %v not allowed", typ)
	}
	return nil
}

// CandidateTypes lists the types whose syntax id satisfies, in lookup order (GNU, Go,
// htlhash): what an UNSPECIFIED type means in Get and Delete.
func CandidateTypes(id string) []debuginfov1.BuildIDType {
	var out []debuginfov1.BuildIDType
	for _, t := range []debuginfov1.BuildIDType{debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, debuginfov1.BuildIDType_BUILD_ID_TYPE_GO, debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH} {
		if ValidateID(t, id) == nil {
			out = append(out, t)
		}
	}
	return out
}

func typeName(t debuginfov1.BuildIDType) string {
	switch t {
	case debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU:
		return "gnu"
	case debuginfov1.BuildIDType_BUILD_ID_TYPE_GO:
		return "go"
	case debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH:
		return "htlhash"
	}
	return "unknown"
}

// pathPart is the ID as a key segment: hex IDs as they are (validated), Go IDs escaped.
func (i ID) pathPart() string {
	if i.Type == debuginfov1.BuildIDType_BUILD_ID_TYPE_GO {
		return typeName(i.Type) + "/" + base64.RawURLEncoding.EncodeToString([]byte(i.ID))
	}
	return typeName(i.Type) + "/" + i.ID
}

// IDsOf lists the IDs of a file, GNU first.
func IDsOf(ids buildid.IDs) []ID {
	var out []ID
	if ids.GNU != "" {
		out = append(out, ID{debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ids.GNU})
	}
	if ids.Go != "" {
		out = append(out, ID{debuginfov1.BuildIDType_BUILD_ID_TYPE_GO, ids.Go})
	}
	if ids.HTLHash != "" {
		out = append(out, ID{debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH, ids.HTLHash})
	}
	return out
}
