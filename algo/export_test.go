package algo

// TreeShape exposes what the two-level model counts of the double binary
// tree, for the test that holds it to package tree's DoubleTree.
func TreeShape(n, ranksPerHost int) (nic int, levels []int) {
	s := newShape(n, ranksPerHost)
	return s.treeNIC, s.treeLevel
}
