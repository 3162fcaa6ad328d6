// Package catalog is the debuginfo store's catalog: the records that say which file is stored
// under which binary IDs, its lifecycle (uploading, available, invalid) and its quality, on
// top of an object store, and the upload protocol's server side that changes them. It is one
// package because every change to a record takes the record's lock and rewrites its aliases;
// its files are split by job so each question has one place to look:
//
//	catalog.go     records and ID aliases: resolve, list, delete, the per-record lock
//	ids.go         binary IDs: syntax per type, the IDs a file is stored under
//	decide.go      where an upload is accepted or refused: ShouldUpload, InitiateUpload,
//	               the ranking of sources and types, reserved uploads
//	verify.go      FinishUpload: verifying uploaded bytes against the claimed ID, storing
//	               them as the record's file, marking a file invalid, ingesting local files
//	inspect.go     reading a file: its IDs, quality, PT_LOAD segments and index
//	indexstore.go  the serialized index and string table stored beside each file
//	sweep.go       the sweeper: upload bytes nobody can finish any more
//
// Object layout (every ID validated, Go build IDs base64url-escaped since they contain '/'):
//
//	records/<type>/<id>/record.json   the record, keyed by the ID of its first upload
//	records/<type>/<id>/<sha256>      the file
//	records/<type>/<id>/<sha256>[variant].v<format>.index   the serialized symbolization index of
//	                                  that file, per index format version (indexstore.go);
//	                                  .strings and .quality beside it likewise
//	ids/<type>/<id>                   alias: the record key an ID resolves to
//	uploads/<upload id>               bytes of an upload until FinishUpload verifies them
package catalog
