"""The read side of the Iceberg REST catalog API, served by `serve --iceberg-rest-port` over the tables of the
server's root and of every root its requests wrote to: the tables' index (`tables.py`), the answers as the spec
defines them (`answers.py`) and the HTTP server with its token and TLS (`server.py`)."""
