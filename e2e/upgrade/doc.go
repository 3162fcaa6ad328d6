// Package upgrade holds the rolling-upgrade drill: symbolizers of an earlier release, built
// from a commit of this repository, and of this tree run as replicas on one MinIO bucket and
// one Redis, in both orders of rollout, under uploads and Symbolize calls; every answer is
// compared with the answer of its release alone.
package upgrade
