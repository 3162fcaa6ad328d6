// Package binaryid says which strings are valid binary IDs of each kind the OTLP semantic
// conventions name (process.executable.build_id.gnu, .go, .htlhash): the one place the
// collector, the gateway and the symbolizer check them, without reading any ELF file.
package binaryid

// MaxGNUDigits bounds a GNU build ID: real ones are 40 hex digits (SHA-1) or 32 (MD5/UUID);
// the note may hold more, never this many.
const MaxGNUDigits = 2048

// maxGo bounds a Go build ID: the go command writes four parts of 20 characters.
const maxGo = 256

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

// ValidGo reports whether s is a Go build ID as the go command writes it (and `go tool
// buildid` prints it): one to four parts separated by '/', each 1 to 64 characters of the
// URL-safe base64 alphabet (the go command's hashes; a custom -buildid that strays outside it
// is not accepted as an ID). Anything an uploader sets as a Go build ID is shown by List and
// the pages: it must not carry markup or control characters.
func ValidGo(s string) bool {
	if s == "" || len(s) > maxGo {
		return false
	}
	parts, run := 1, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '/':
			if run == 0 {
				return false
			}
			parts, run = parts+1, 0
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			run++
		default:
			return false
		}
		if parts > 4 || run > 64 {
			return false
		}
	}
	return run > 0
}
