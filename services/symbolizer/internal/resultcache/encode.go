package resultcache

import (
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	symbolizerv1 "github.com/profsym/profsym/gen/profsym/symbolizer/v1"
)

// Cached values are Location messages in protobuf wire format. The Symbolize handler copies
// them into its response as they are (as the bytes of ModuleResult.locations), so a batch of
// cache hits costs no decoding, no per-frame allocation and no re-encoding.

var marshalOpts = proto.MarshalOptions{Deterministic: true}

// EncodeLocation returns the cache value of a Location.
func EncodeLocation(loc *symbolizerv1.Location) (string, error) {
	b, err := marshalOpts.Marshal(loc)
	if err != nil {
		return "", fmt.Errorf("encode location: %w", err)
	}
	return string(b), nil
}

var errMalformed = errors.New("malformed Location")

// ValidateLocation checks that v is a Location this server writes: field 1 (frames) only,
// each Frame with strings 1 to 3 in UTF-8 and varints 4 to 6 that fit in 32 bits. It walks
// the wire format without allocating.
func ValidateLocation(v string) error {
	// Read-only view of the string's bytes: validating 10,000 values must not copy them.
	b := unsafe.Slice(unsafe.StringData(v), len(v))
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return fmt.Errorf("%w: unexpected field %d type %d", errMalformed, num, typ)
		}
		b = b[n:]
		frame, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("%w: truncated frame", errMalformed)
		}
		b = b[n:]
		if err := validateFrame(frame); err != nil {
			return err
		}
	}
	return nil
}

func validateFrame(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: bad tag in frame", errMalformed)
		}
		b = b[n:]
		switch {
		case num >= 1 && num <= 3 && typ == protowire.BytesType:
			s, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(s) {
				return fmt.Errorf("%w: frame field %d is not a UTF-8 string", errMalformed, num)
			}
			b = b[n:]
		case num >= 4 && num <= 6 && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 || x > 1<<32-1 {
				return fmt.Errorf("%w: frame field %d is not a uint32", errMalformed, num)
			}
			b = b[n:]
		default:
			return fmt.Errorf("%w: unexpected frame field %d type %d", errMalformed, num, typ)
		}
	}
	return nil
}
