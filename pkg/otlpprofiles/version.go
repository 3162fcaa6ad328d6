package otlpprofiles

import "fmt"

// The OTLP profiles development version a request claims. pdata's pprofileotlp offers these
// from v0.164.0; the Collector line profsym builds on (v0.162.0, see
// docs/design/0002-collector-integration.md) has no version header yet, so they live here until
// the project moves to a Collector release whose pdata has them.
const (
	// DevelopmentVersionHeader is the gRPC metadata key and HTTP header that carries it.
	DevelopmentVersionHeader = "otlp-profiles-development-version"
	// DevelopmentVersion is the one version this code reads and writes.
	DevelopmentVersion = "1"
)

// ValidateDevelopmentVersion checks every value of the version header before the payload is
// decoded. Absent means version 1 (producers older than the header); repeated, malformed and
// unsupported values are refused: an exact match also refuses empty strings, leading zeros
// and comma-joined values an HTTP intermediary may have combined.
func ValidateDevelopmentVersion(values []string) error {
	if len(values) > 1 {
		return fmt.Errorf("%s must contain exactly one value", DevelopmentVersionHeader)
	}
	if len(values) == 1 && values[0] != DevelopmentVersion {
		return fmt.Errorf("invalid or unsupported %s: supported version is %s", DevelopmentVersionHeader, DevelopmentVersion)
	}
	return nil
}
