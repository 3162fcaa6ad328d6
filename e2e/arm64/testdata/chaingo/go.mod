module chaingo

go 1.22
