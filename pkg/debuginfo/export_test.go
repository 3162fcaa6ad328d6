package debuginfo

// IsPackageInitializer is isPackageInitializer, for the tests that pick a Go program's
// initializers.
var IsPackageInitializer = isPackageInitializer
