// Package binaryid says which strings are valid binary IDs of each kind the OTLP semantic
// conventions name (process.executable.build_id.gnu, .go, .htlhash): the one place the
// collector, the gateway and the symbolizer check them, without reading any ELF file.
package binaryid

// MaxGNUDigits bounds a GNU build ID: real ones are 40 hex digits (SHA-1) or 32 (MD5/UUID);
// the note may hold more, never this many.
const MaxGNUDigits = 2048

// goPart is the length of each part of a Go build ID: the go command writes a hash as the
// URL-safe base64 of its first 15 bytes (cmd/go/internal/work.hashToString), 20 characters.
const goPart = 20

// GoSyntax says in words what ValidGo accepts, for error messages.
const GoSyntax = "2 or 4 parts of 20 characters of A-Z a-z 0-9 - _ separated by /, as go tool buildid prints it"

// ValidHex reports whether s is a non-empty, even-length string of lower-case hex digits.
func ValidHex(s string) bool {
	if s == "" || len(s)%2 != 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidGNU reports whether s is a GNU build ID as OTLP carries it: lower-case hex of the
// NT_GNU_BUILD_ID note, 2 to MaxGNUDigits digits.
func ValidGNU(s string) bool { return ValidHex(s) && len(s) <= MaxGNUDigits }

// ValidHTLHash reports whether s is an htlhash: 32 lower-case hex digits.
func ValidHTLHash(s string) bool { return len(s) == 32 && ValidHex(s) }

// ValidGo reports whether s is a Go build ID as the go command writes it and `go tool buildid`
// prints it: actionID/contentID for a package archive, and for an executable
// actionID/contentID of the main package then of the link, each a 20-character hash in the
// URL-safe base64 alphabet. Nothing else is an ID: a -ldflags=-buildid=<anything> chosen by
// hand (Bazel's "redacted", say) is shared by unrelated binaries and names none of them, and
// anything accepted here is shown by List and the pages, so it must stay a hash's shape rather
// than a message of its writer's choosing.
func ValidGo(s string) bool {
	if len(s) != 2*goPart+1 && len(s) != 4*goPart+3 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if i%(goPart+1) == goPart {
			if c != '/' {
				return false
			}
			continue
		}
		if (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}
