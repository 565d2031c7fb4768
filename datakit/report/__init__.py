"""What happened to the data: the run summary's figures (`summary`), and the building blocks of the HTML
reports (`charts`, `html`) shared by `datakit report` and the ferry's report page."""
