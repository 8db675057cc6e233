"""Users' text around the translator: paragraphs split into sentences and long sentences cut (sentences.py), word
alignments from attention (words.py), markup (markup.py: HTML and XML) and subtitles (subtitles.py: SRT and WebVTT).
Each takes the text apart, hands plain sentences to a translator, and puts the translations back in place."""
