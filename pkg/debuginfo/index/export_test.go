package index

// ReferenceLookup and EdgeAddrs give the external tests (which build indexes through package
// debuginfo, which imports this one) the plain lookup to compare against.
func (ix *Index) ReferenceLookup(addr uint64) []Frame { return ix.referenceLookup(addr) }
func (ix *Index) EdgeAddrs() []uint64                 { return ix.edgeAddrs() }
