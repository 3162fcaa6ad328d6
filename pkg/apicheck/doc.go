// Package apicheck pins the public API contract of proto/ in tests: the generated code in
// gen/ matches the .proto sources, every element is documented, enums follow the
// UNSPECIFIED-zero convention, and the fields and methods that the services and clients
// rely on keep their names, numbers and types.
package apicheck
