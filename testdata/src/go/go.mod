module corpus

go 1.26
